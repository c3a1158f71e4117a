"""A streamed job's audit sink (decoding.worker.sinks.sink_for): on PostgreSQL in a worker each
step is committed while the next is computed, the stream's reader is told only after a commit, every
record is committed before the result returns, and a failed commit stops the stream with
nothing more written; inside a transaction, step by step."""

import time
import uuid

import pytest
from django.db import connection, transaction

from audit.evidence import chain
from audit.models import DecisionRecord
from audit.store import trail_open
from decoding.engine import (
    AuditSink,
    AuditUnavailable,
    DraftModelDrafter,
    GenerationParams,
    GenerationRequest,
    SpeculativeDecoder,
    StubProvider,
)
from decoding.worker.sinks import BackgroundTrailSink, SteppedTrailSink, TrailSink, sink_for


def decode(sink, max_tokens=40):
    decoder = SpeculativeDecoder(DraftModelDrafter(StubProvider(seed=0)), StubProvider(), sink)
    return decoder.generate(GenerationRequest("r", (1, 2), GenerationParams(max_tokens=max_tokens)))


def stored(trail):
    return list(DecisionRecord.objects.filter(trail=trail).order_by("seq"))


def assert_linked(trail, rows):
    expected = trail.genesis_hash
    for seq, row in enumerate(rows):
        assert (row.seq, row.prev_hash) == (seq, expected)
        expected = chain.record_hash(str(trail.id), row.seq, row.prev_hash, row.payload)
        assert row.record_hash == expected


class SlowSink(AuditSink):
    """Stands in for TrailSink behind the background sink, whose thread would otherwise need a
    committed trail (the audit tables refuse the TRUNCATE a transactional test ends with; the
    system tests stream through the real one on a live worker). Each flush takes `delay` s and
    moves what it holds to `committed`, or raises on flush number `fail_on`."""

    trail_id = uuid.uuid4()

    def __init__(self, delay=0.0, fail_on=None):
        self.held, self.committed, self.flushes = [], [], 0
        self._delay, self._fail_on = delay, fail_on

    def record(self, record):
        self.held.append(record)

    def flush(self):
        self.flushes += 1
        time.sleep(self._delay)
        if self.flushes == self._fail_on:
            raise OSError("disk full")
        self.committed += self.held
        self.held = []


def test_a_worker_in_autocommit_on_postgresql_streams_through_the_background_sink(
    django_db_blocker,
):
    with django_db_blocker.unblock():
        assert connection.vendor == "postgresql" and not connection.in_atomic_block
        with sink_for(
            uuid.uuid4(), head=(0, "0" * 64), salt="00" * 32, committed=lambda: None
        ) as sink:
            assert isinstance(sink, BackgroundTrailSink)
        assert not sink._thread.is_alive()


def test_the_background_sink_tells_the_reader_only_after_a_commit_and_has_all_before_the_result():
    inner, told = SlowSink(delay=0.002), []
    sink = BackgroundTrailSink(inner, lambda: told.append(len(inner.committed)), interval_s=0)
    try:
        result = decode(sink, max_tokens=60)
        committed = list(inner.committed)  # when generate() returned
    finally:
        sink.close()
    assert result.steps > 3 and [r.step for r in committed] == list(range(result.steps))
    assert told == sorted(told) and told[0] >= 1 and told[-1] == result.steps
    emitted = [t for r in committed for t in r.emitted]
    assert emitted == list(result.output_token_ids)


def test_steps_decided_during_a_slow_commit_go_into_the_next_one():
    inner = SlowSink(delay=0.05)
    sink = BackgroundTrailSink(inner, lambda: None, interval_s=0)
    try:
        result = decode(sink, max_tokens=60)
    finally:
        sink.close()
    assert len(inner.committed) == result.steps
    assert inner.flushes < result.steps  # a group commit, not one per step


def test_commits_come_at_most_once_per_interval_but_a_flush_does_not_wait_for_it():
    inner, told = SlowSink(), []
    sink = BackgroundTrailSink(inner, lambda: told.append(len(inner.committed)), interval_s=30)
    started = time.monotonic()
    try:
        result = decode(sink, max_tokens=60)
    finally:
        sink.close()
    assert time.monotonic() - started < 10
    assert len(inner.committed) == result.steps > 3
    assert inner.flushes <= 2 and told[-1] == result.steps  # the first steps, then the rest


class AfterFirstCommit(AuditSink):
    """Hands records on, but holds step `step` until `inner` has committed once: the steps
    after it go into a later commit however fast the decoder is (the stub can decode 400
    tokens before the sink's thread first wakes, which left one commit and nothing to fail)."""

    def __init__(self, sink: AuditSink, inner: SlowSink, step: int = 10):
        self._sink, self._inner, self._step = sink, inner, step

    def record(self, record):
        if record.step == self._step:
            deadline = time.monotonic() + 10
            while self._inner.flushes < 1 and time.monotonic() < deadline:
                time.sleep(0.001)
        self._sink.record(record)

    def flush(self):
        self._sink.flush()


def test_a_commit_that_fails_ends_the_stream_and_nothing_more_is_committed():
    inner, told = SlowSink(fail_on=2), []
    sink = BackgroundTrailSink(inner, lambda: told.append(len(inner.committed)), interval_s=0)
    with pytest.raises(AuditUnavailable) as failure:
        try:
            decode(AfterFirstCommit(sink, inner), max_tokens=400)
        finally:
            sink.close()
    assert isinstance(failure.value.__cause__, OSError)
    assert not sink._thread.is_alive()
    assert inner.flushes == 2 and len(told) == 1  # nothing told of the failed commit
    assert inner.committed and told == [len(inner.committed)]


@pytest.mark.django_db
def test_inside_a_transaction_a_stream_commits_step_by_step_on_the_decoders_thread():
    trail = trail_open(job_id=uuid.uuid4(), attempt=1)
    told = []

    def committed():
        told.append(DecisionRecord.objects.filter(trail=trail).count())

    head = (0, trail.head_hash)
    with (
        transaction.atomic(),
        sink_for(trail.id, head=head, salt=trail.salt, committed=committed) as sink,
    ):
        assert isinstance(sink, SteppedTrailSink)  # another connection would not see it
        result = decode(sink)
    assert told == list(range(1, result.steps + 1))
    assert_linked(trail, stored(trail))


@pytest.mark.django_db
def test_a_job_answered_at_the_end_batches_its_records():
    trail = trail_open(job_id=uuid.uuid4(), attempt=1)
    with sink_for(trail.id, head=(0, trail.head_hash), salt=trail.salt) as sink:
        assert isinstance(sink, TrailSink)
        result = decode(sink)
    rows = stored(trail)
    assert len(rows) == result.steps
    assert_linked(trail, rows)

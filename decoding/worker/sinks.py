"""The engine's audit sinks, backed by the audit store.

A job answered at the end batches its records (TrailSink). A stream's reader releases a step's
tokens once it finds the step's record committed in the store, so a streamed job's records are
committed as soon as each step is decided and its reader is told: on PostgreSQL by a thread of
the sink's own while the decoder computes the next step (BackgroundTrailSink), elsewhere step
by step on the decoder's thread (SteppedTrailSink). `sink_for` holds the choice.
"""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections.abc import Callable, Iterator

from django.conf import settings
from django.db import connection

from audit.evidence import binding
from audit.store import sealed_decision, trail_extend
from decoding.engine import AuditSink, AuditUnavailable, StepRecord
from decoding.metrics import AUDIT_COMMIT_SECONDS

# Records held before a commit is forced, when the decoder releases nothing in between: a
# commit per step costs 16-29% of decode time on the default model, one per 16 steps 3-7%
# (bench/results/heldout-*): most of a commit's cost is per commit, not per record. The
# decoder still flushes before any token leaves.
STEPS_PER_COMMIT = 64


class TrailSink(AuditSink):
    """Appends records to one trail, in one transaction per STEPS_PER_COMMIT steps, after the
    head its last append left (`head`: the next seq and the head hash); it is the trail's only
    writer. Each step is sealed under the trail's `salt`, as its `format_version` seals (audit
    formats 3 and 4): the record holds commitments, the row beside it their values."""

    def __init__(
        self,
        trail_id: uuid.UUID,
        *,
        head: tuple[int, str],
        salt: str,
        format_version: int = binding.FORMAT_VERSION,
        steps_per_commit: int = STEPS_PER_COMMIT,
    ):
        self.trail_id = trail_id
        self._head = head
        self._salt = salt
        self._format_version = format_version
        self._steps_per_commit = steps_per_commit
        self._pending: list[str] = []
        self._openings: list[str] = []

    def record(self, record: StepRecord) -> None:
        text, values = sealed_decision(record.payload(), self._salt, self._format_version)
        self._pending.append(text)
        self._openings.append(values)
        if len(self._pending) >= self._steps_per_commit:
            self.flush()

    def flush(self) -> None:
        if self._pending:
            started = time.perf_counter()
            seq, head = self._head
            self._head = trail_extend(
                trail_id=self.trail_id,
                seq=seq,
                head=head,
                texts=self._pending,
                openings=self._openings,
            )
            AUDIT_COMMIT_SECONDS.observe(time.perf_counter() - started)
            self._pending, self._openings = [], []


class SteppedTrailSink(AuditSink):
    """A stream's sink on the decoder's thread: each record committed before record() returns,
    then `committed` is called (the stream's reader told to look)."""

    def __init__(self, sink: TrailSink, committed: Callable[[], None]):
        self._sink = sink
        self._committed = committed

    def record(self, record: StepRecord) -> None:
        self._sink.record(record)
        self._sink.flush()
        self._committed()


class BackgroundTrailSink(AuditSink):
    """A stream's sink that commits on a thread (and database connection) of its own, so a
    step's commit overlaps the next step's computation instead of adding to it.

    record() only queues; the thread commits whatever is queued in one append, at most once
    per `interval_s` (the steps decided meanwhile go into the next: a group commit), and then
    calls `committed`. On a machine whose cores all decode, a commit's CPU (the database's
    insert and trigger) is not hidden by the overlap; the interval bounds how often it is paid,
    at the price of a chunk reaching the reader up to that much later. Once a commit fails
    nothing more is committed, and the next record() or flush() raises AuditUnavailable, so
    the decoder stops and its result is never released. close() ends the thread; call it
    however decoding ends.
    """

    def __init__(self, sink: TrailSink, committed: Callable[[], None], *, interval_s: float):
        self._sink = sink
        self._committed = committed
        self._interval_s = interval_s
        self._queued: list[StepRecord] = []
        self._busy = False
        self._hurry = False  # someone waits for everything to be committed: no interval
        self._closing = False
        self._error: BaseException | None = None
        self._changed = threading.Condition()
        self._thread = threading.Thread(
            target=self._commit_queued, name=f"audit-{sink.trail_id}", daemon=True
        )
        self._thread.start()

    def record(self, record: StepRecord) -> None:
        with self._changed:
            self._raise_if_failed()
            self._queued.append(record)
            self._changed.notify_all()

    def flush(self) -> None:
        with self._changed:
            self._hurry = True
            self._changed.notify_all()
            while (self._queued or self._busy) and self._error is None:
                self._changed.wait()
            self._hurry = False
            self._raise_if_failed()

    def close(self) -> None:
        with self._changed:
            self._closing = True
            self._changed.notify_all()
        self._thread.join()

    def _raise_if_failed(self) -> None:
        if self._error is not None:
            raise AuditUnavailable(
                f"audit store could not commit a step of trail {self._sink.trail_id}"
            ) from self._error

    def _next_commit(self, last_commit: float) -> list[StepRecord]:
        """What to commit next, once there is something and the interval since the last commit
        has passed (at once for a flush or close); nothing once closing with nothing queued."""
        with self._changed:
            self._changed.wait_for(lambda: self._queued or self._closing)
            due = last_commit + self._interval_s
            self._changed.wait_for(
                lambda: self._hurry or self._closing, timeout=max(0.0, due - time.monotonic())
            )
            steps, self._queued = self._queued, []
            self._busy = bool(steps)
            return steps

    def _commit_queued(self) -> None:
        last_commit = float("-inf")
        try:
            while steps := self._next_commit(last_commit):
                last_commit = time.monotonic()
                for record in steps:
                    self._sink.record(record)
                self._sink.flush()
                with self._changed:
                    self._busy = False
                    self._changed.notify_all()
                self._committed()
        except BaseException as exc:  # kept for the decoder's thread, which fails the job
            with self._changed:
                self._error, self._busy = exc, False
                self._changed.notify_all()
        finally:
            connection.close()  # this thread's own connection, opened by its first commit


@contextlib.contextmanager
def sink_for(
    trail_id: uuid.UUID,
    *,
    head: tuple[int, str],
    salt: str,
    format_version: int = binding.FORMAT_VERSION,
    committed: Callable[[], None] | None = None,
    interval_ms: int | None = None,
) -> Iterator[AuditSink]:
    """The sink for one attempt's steps, appended after `head` and sealed under the trail's
    `salt` as its `format_version` seals. Without `committed` the records
    commit (a job answered at the end); with it (a stream) each step is committed as soon as it
    is decided and `committed` is called after each commit: in the background on PostgreSQL
    when the caller is in autocommit (a worker), whose commits need no lock on the trail; on the
    decoder's thread otherwise (SQLite's single writer; a caller's open transaction, which
    another connection could not see). interval_ms: at most one commit per this many ms
    (default PATHFINDER_STREAM_COMMIT_INTERVAL_MS)."""
    trail_sink = TrailSink(trail_id, head=head, salt=salt, format_version=format_version)
    if committed is None:
        yield trail_sink
    elif connection.vendor == "postgresql" and not connection.in_atomic_block:
        if interval_ms is None:
            interval_ms = settings.PATHFINDER_STREAM_COMMIT_INTERVAL_MS
        interval_s = interval_ms / 1000
        background = BackgroundTrailSink(trail_sink, committed, interval_s=interval_s)
        try:
            yield background
        finally:
            background.close()
    else:
        yield SteppedTrailSink(trail_sink, committed)

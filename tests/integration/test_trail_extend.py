"""The writer's one-statement append (audit.store.trail_extend) on the real PostgreSQL: the same
rows and hashes as the transactional append, and nothing written when the trail is not where
its writer left it."""

import uuid

import pytest
from django.db import connection

from audit.evidence import chain
from audit.models import DecisionRecord, Trail
from audit.store import TrailMoved, trail_append_many, trail_extend, trail_open, trail_seal

pytestmark = pytest.mark.django_db


def texts(n, start=0):
    return [chain.canonical_json({"v": 2, "kind": "decision", "step": start + i}) for i in range(n)]


def test_it_appends_the_same_rows_and_hashes_as_a_transactional_append():
    assert connection.vendor == "postgresql"  # the one-statement path
    fast, slow = (
        trail_open(job_id=uuid.uuid4(), attempt=1),
        trail_open(job_id=uuid.uuid4(), attempt=1),
    )
    head = (0, fast.head_hash)
    for batch in (texts(1), texts(3, 1), texts(16, 4)):
        head = trail_extend(trail_id=fast.id, seq=head[0], head=head[1], texts=batch)
        trail_append_many(trail_id=slow.id, texts=batch)
    fast.refresh_from_db()
    assert (fast.record_count, fast.head_hash) == head
    rows = list(DecisionRecord.objects.filter(trail=fast).order_by("seq"))
    assert [r.seq for r in rows] == list(range(20))
    expected = fast.genesis_hash
    for row in rows:  # every hash recomputed from the payload and its predecessor
        assert row.prev_hash == expected
        expected = chain.record_hash(str(fast.id), row.seq, row.prev_hash, row.payload)
        assert row.record_hash == expected
    assert [r.payload for r in rows] == [
        r.payload for r in DecisionRecord.objects.filter(trail=slow).order_by("seq")
    ]


def test_a_writer_whose_head_is_stale_writes_nothing():
    trail = trail_open(job_id=uuid.uuid4(), attempt=1)
    head = trail_extend(trail_id=trail.id, seq=0, head=trail.head_hash, texts=texts(2))
    with pytest.raises(TrailMoved):
        trail_extend(trail_id=trail.id, seq=0, head=trail.head_hash, texts=texts(1, 2))
    with pytest.raises(TrailMoved):
        trail_extend(trail_id=trail.id, seq=head[0], head="0" * 64, texts=texts(1, 2))
    assert DecisionRecord.objects.filter(trail=trail).count() == 2


def test_a_sealed_trail_takes_nothing_more():
    trail = trail_open(job_id=uuid.uuid4(), attempt=1)
    head = trail_extend(trail_id=trail.id, seq=0, head=trail.head_hash, texts=texts(1))
    trail_seal(trail_id=trail.id, outcome=Trail.Outcome.SUCCEEDED)
    with pytest.raises(TrailMoved):
        trail_extend(trail_id=trail.id, seq=head[0], head=head[1], texts=texts(1, 1))
    assert DecisionRecord.objects.filter(trail=trail).count() == 1

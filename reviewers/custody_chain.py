"""The custody chain in the database (its bytes and their check: reviewers.custody).

One writer at a time extends the chain (a PostgreSQL advisory lock; SQLite serialises writers
itself). An action that writes something (verify, replay, export, annotate, sign off) appends
its event in its own transaction, waiting for the writer's turn. A page view does not wait:
it is written as pending and chained at once if the chain is free, else by the writer holding
it, the next view or action, or the periodic sweep — so views never queue behind one lock.

Checking the chain on the custody page costs what was chained since the last verified point
(CustodyPoint), not the whole history: a point is used only if its MAC (the secret key) holds
and the event it names is still there with that hash, recomputed from its row; the periodic
check walks the chain from its start and leaves a point of its own.
"""

from __future__ import annotations

from django.db import connection, transaction
from django.utils import timezone
from django.utils.crypto import constant_time_compare, salted_hmac

from audit.evidence.chain import canonical_json

from . import custody
from .models import CustodyEvent, CustodyPending, CustodyPoint

# pg_advisory_xact_lock key for custody appends ("PFCUSTDY" as an integer).
_LOCK_KEY = int.from_bytes(b"PFCUSTDY", "big") & 0x7FFF_FFFF_FFFF_FFFF
_MAC_SALT = "pathfinder.custody.verified-point"
_PENDING_BATCH = 500


def _lock(*, wait: bool) -> bool:
    """Take the chain for this transaction; without `wait`, only if nobody holds it."""
    if connection.vendor != "postgresql":
        return True
    with connection.cursor() as cursor:
        if wait:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [_LOCK_KEY])
            return True
        cursor.execute("SELECT pg_try_advisory_xact_lock(%s)", [_LOCK_KEY])
        return cursor.fetchone()[0]


def _head() -> tuple[int, str]:
    last = CustodyEvent.objects.order_by("-seq").only("seq", "event_hash").first()
    return (last.seq + 1, last.event_hash) if last else (0, custody.custody_genesis_hash())


def _event(seq, prev_hash, *, user, action, job_id, trail_id, detail, at) -> CustodyEvent:
    payload = custody.custody_payload(
        action=action,
        user_id=user.pk,
        username=user.get_username(),
        job_id=job_id,
        trail_id=trail_id,
        detail=detail,
        at=at,
    )
    return CustodyEvent(
        seq=seq,
        user=user,
        action=action,
        job_id=job_id,
        trail_id=trail_id,
        detail=canonical_json(detail),
        payload=payload,
        created_at=at,
        prev_hash=prev_hash,
        event_hash=custody.custody_event_hash(seq, prev_hash, payload),
    )


def _chain_pending(seq: int, prev_hash: str) -> tuple[int, str]:
    """Chain every pending view (the lock held), oldest first; returns the new head."""
    while True:
        pending = list(
            CustodyPending.objects.select_related("user").order_by("id")[:_PENDING_BATCH]
        )
        if not pending:
            return seq, prev_hash
        events = []
        for view in pending:
            event = _event(
                seq,
                prev_hash,
                user=view.user,
                action=CustodyEvent.Action.VIEW,
                job_id=str(view.job_id) if view.job_id else None,
                trail_id=str(view.trail_id) if view.trail_id else None,
                detail=view.detail,
                at=view.at,
            )
            events.append(event)
            seq, prev_hash = seq + 1, event.event_hash
        CustodyEvent.objects.bulk_create(events)
        CustodyPending.objects.filter(id__in=[view.id for view in pending]).delete()


def custody_append(*, user, action: str, job=None, detail: dict | None = None) -> CustodyEvent:
    """Append one event (after any pending views), in the caller's transaction."""
    with transaction.atomic():
        _lock(wait=True)
        seq, prev_hash = _chain_pending(*_head())
        event = _event(
            seq,
            prev_hash,
            user=user,
            action=action,
            job_id=str(job.id) if job is not None else None,
            trail_id=str(job.trail_id) if job is not None and job.trail_id else None,
            detail=detail or {},
            at=timezone.now(),
        )
        event.save()
        return event


def custody_view(*, user, job, detail: dict) -> None:
    """Record a page view without waiting on the chain: pending now, chained at once if the
    chain is free (else by whoever holds it next)."""
    CustodyPending.objects.create(
        user=user, job_id=job.id, trail_id=job.trail_id, detail=detail, at=timezone.now()
    )
    custody_chain_pending()


def custody_chain_pending() -> int:
    """Chain the pending views if nobody holds the chain; returns how many were chained."""
    with transaction.atomic():
        if not _lock(wait=False):
            return 0
        start, _ = head = _head()
        return _chain_pending(*head)[0] - start


# --- Verified points -----------------------------------------------------------------------


def _mac(seq: int, event_hash: str) -> str:
    return salted_hmac(_MAC_SALT, f"{seq}:{event_hash}", algorithm="sha256").hexdigest()


def _stored(events):
    return (
        custody.StoredEvent(
            seq=event.seq,
            prev_hash=event.prev_hash,
            event_hash=event.event_hash,
            payload=event.payload,
            action=event.action,
            user_id=event.user_id,
            job_id=str(event.job_id) if event.job_id else None,
            trail_id=str(event.trail_id) if event.trail_id else None,
            detail=event.detail,
            at=event.created_at,
        )
        for event in events
    )


def _point_problem(point: CustodyPoint) -> str | None:
    """Why a stored point cannot be trusted, or None."""
    if not constant_time_compare(point.mac, _mac(point.seq, point.event_hash)):
        return f"the verified point at seq {point.seq} does not check (its MAC)"
    event = CustodyEvent.objects.filter(seq=point.seq).first()
    if event is None or event.event_hash != point.event_hash:
        return f"the event at the verified point (seq {point.seq}) is gone or was rewritten"
    if custody.custody_event_hash(event.seq, event.prev_hash, event.payload) != event.event_hash:
        return f"the event at the verified point (seq {point.seq}) does not hash to itself"
    return None


def custody_verify(*, from_start: bool = False) -> tuple[custody.CustodyReport, int | None]:
    """Check the chain from the last verified point (or `from_start`), leave a new point at
    the head when intact; returns the report and the seq the check started after (None: from
    the start)."""
    point = None if from_start else CustodyPoint.objects.order_by("-id").first()
    report = custody.CustodyReport()
    if point is not None:
        problem = _point_problem(point)
        if problem:
            report.failures.append(custody.CustodyFailure(point.seq, problem))
            point = None  # not taken on its word: walk from the start
    after = (point.seq, point.event_hash) if point else None
    events = CustodyEvent.objects.order_by("seq", "id")
    if point is not None:
        events = events.filter(seq__gt=point.seq)
    walked = custody.verify_events(_stored(events.iterator(chunk_size=2000)), after=after)
    report.events_checked = walked.events_checked
    report.failures += walked.failures
    head = CustodyEvent.objects.order_by("-seq").only("seq", "event_hash").first()
    if report.ok and head is not None and (point is None or head.seq > point.seq):
        CustodyPoint.objects.create(
            seq=head.seq,
            event_hash=head.event_hash,
            mac=_mac(head.seq, head.event_hash),
            full_walk=after is None,
        )
    return report, (point.seq if point else None)

"""A job's status changes, in one place: each is one conditional UPDATE from the states it may
leave (and, for a running job, from the attempt that owns it), so two processes racing over a
job (a worker and a sweep, two deliveries, a cancel and a finish) cannot both move it. Each
answers whether it moved the job; nothing else writes GenerationJob.status.

    queued  -> running (an attempt starts), failed (not queued), cancelled (before it ran)
    running -> running (a new attempt after a lost worker), succeeded, cancelled, failed
    failed  -> queued (an operator's retry)
"""

from __future__ import annotations

import datetime as dt
import uuid

from django.conf import settings
from django.db.models import QuerySet
from django.utils import timezone

from decoding.models import GenerationJob

Status = GenerationJob.Status

ALLOWED: dict[str, frozenset[str]] = {
    Status.QUEUED: frozenset({Status.RUNNING, Status.FAILED, Status.CANCELLED}),
    Status.RUNNING: frozenset({Status.RUNNING, Status.SUCCEEDED, Status.CANCELLED, Status.FAILED}),
    Status.FAILED: frozenset({Status.QUEUED}),
}


class IllegalTransition(ValueError):
    """A status change the lifecycle does not have (a programming error, never user input)."""


def _move(job_id: uuid.UUID, *, leaving: tuple[str, ...], to: str, attempt=None, **fields) -> bool:
    rows = GenerationJob.objects.filter(pk=job_id)
    if attempt is not None:
        rows = rows.filter(attempts=attempt)
    return bool(_move_rows(rows, leaving=leaving, to=to, **fields))


def _move_rows(rows: QuerySet, *, leaving: tuple[str, ...], to: str, **fields) -> int:
    for source in leaving:
        if to not in ALLOWED.get(source, ()):
            raise IllegalTransition(f"a job does not go from {source} to {to}")
    return rows.filter(status__in=leaving).update(status=to, **fields)


def lease_until() -> dt.datetime:
    return timezone.now() + dt.timedelta(seconds=settings.PATHFINDER_JOB_LEASE_S)


def owned(job_id: uuid.UUID, attempt: int):
    """The job row, as long as this attempt still runs it (for the attempt's own writes)."""
    return GenerationJob.objects.filter(pk=job_id, attempts=attempt, status=Status.RUNNING)


def attempt_start(job: GenerationJob, *, trail_id: uuid.UUID, worker: str) -> bool:
    """Start the next attempt on a queued job, or on a running one whose lease lapsed; `job` is
    the row as read under its lock, and is updated to the new attempt."""
    now = timezone.now()
    fields = {
        "attempts": job.attempts + 1,
        "started_at": job.started_at or now,
        "lease_expires_at": lease_until(),
        "worker": worker,
        "trail_id": trail_id,
    }
    started = _move(
        job.pk, leaving=(job.status,), to=Status.RUNNING, attempt=job.attempts, **fields
    )
    if started:
        job.status = Status.RUNNING
        for name, value in fields.items():
            setattr(job, name, value)
    return started


def attempt_finish(job_id: uuid.UUID, attempt: int, *, cancelled: bool, **result) -> str | None:
    """The owning attempt's answer: succeeded, or cancelled at a step boundary. The status it
    took, or None when the attempt no longer owned the job."""
    status = Status.CANCELLED if cancelled else Status.SUCCEEDED
    done = _move(
        job_id,
        leaving=(Status.RUNNING,),
        to=status,
        attempt=attempt,
        lease_expires_at=None,
        finished_at=timezone.now(),
        **result,
    )
    return status if done else None


def attempt_fail(job_id: uuid.UUID, attempt: int, failure: str, *, error: str = "") -> bool:
    """The owning attempt failed; the job keeps the failure kind and a label for its caller."""
    return _move(
        job_id,
        leaving=(Status.RUNNING,),
        to=Status.FAILED,
        attempt=attempt,
        error=error or GenerationJob.Failure(failure).label,
        failure=failure,
        lease_expires_at=None,
        finished_at=timezone.now(),
    )


def lost_job_end(job: GenerationJob) -> str | None:
    """A running job whose worker died ends here when it was cancelled (cancelled) or has used
    every attempt (failed); None when it may run again."""
    if job.cancel_requested_at is not None:
        ended = _move(
            job.pk,
            leaving=(Status.RUNNING,),
            to=Status.CANCELLED,
            attempt=job.attempts,
            error="",
            finished_at=timezone.now(),
            lease_expires_at=None,
        )
        return Status.CANCELLED if ended else None
    if job.attempts >= settings.PATHFINDER_MAX_ATTEMPTS:
        failed = attempt_fail(
            job.pk,
            job.attempts,
            GenerationJob.Failure.WORKER_LOST,
            error=f"the worker was lost in each of {job.attempts} attempts",
        )
        return Status.FAILED if failed else None
    return None


def queue_failed(job_id: uuid.UUID) -> bool:
    """A stored job the queue would not take: failed, not lost, and never run."""
    return _move(
        job_id,
        leaving=(Status.QUEUED,),
        to=Status.FAILED,
        error=GenerationJob.Failure.QUEUE_UNAVAILABLE.label,
        failure=GenerationJob.Failure.QUEUE_UNAVAILABLE,
        finished_at=timezone.now(),
    )


def queued_cancel(job_id: uuid.UUID) -> bool:
    """A queued job cancelled before any attempt ran it."""
    return _move(job_id, leaving=(Status.QUEUED,), to=Status.CANCELLED, finished_at=timezone.now())


def queued_cancel_all(job_ids: list[uuid.UUID]) -> int:
    """Each of these jobs still queued cancelled before any attempt ran it, in one UPDATE (a
    cancelled batch's unsent lines); returns how many."""
    now = timezone.now()
    rows = GenerationJob.objects.filter(pk__in=job_ids)
    fields = {"cancel_requested_at": now, "finished_at": now}
    return _move_rows(rows, leaving=(Status.QUEUED,), to=Status.CANCELLED, **fields)


def failed_requeue(job_id: uuid.UUID) -> bool:
    """An operator's retry of a failed job: queued again, to run as a new attempt."""
    return _move(
        job_id,
        leaving=(Status.FAILED,),
        to=Status.QUEUED,
        error="",
        failure="",
        finished_at=None,
        lease_expires_at=None,
    )

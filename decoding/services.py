"""Writes for generation jobs and API keys. Views and tasks stay thin and call these."""

from __future__ import annotations

import datetime as dt
import logging
import secrets

from django.conf import settings
from django.db import DatabaseError, IntegrityError, transaction
from django.utils import timezone

from audit.export import ExportError
from audit.matter_export import MatterExport, MatterSelection, matter_export
from audit.models import Trail
from audit.store import trail_seal
from decoding import delivery, events, fair_share, lifecycle
from decoding.job_input import JobInput, job_input
from decoding.models import ApiKey, Batch, GenerationJob, Matter, Replay
from decoding.selectors import batch_trail_ids, matter_trail_ids

logger = logging.getLogger(__name__)


class QueueUnavailable(Exception):
    """The job was stored but could not be handed to a worker; it has been failed, not lost."""


class JobFinished(Exception):
    """The job already ended; there is nothing left to cancel."""


def api_key_create(
    *,
    matter_name: str,
    name: str,
    scopes: list[str] | None = None,
    expires_at=None,
    owner: str = "",
) -> tuple[ApiKey, str]:
    """Create a key for a matter (creating the matter if needed). The raw key is returned once."""
    with transaction.atomic():
        matter, _ = Matter.objects.get_or_create(name=matter_name)
        key = ApiKey(
            matter=matter,
            name=name,
            scopes=list(scopes) if scopes else list(ApiKey.Scope.values),
            expires_at=expires_at,
            owner=owner,
        )
        raw_key = api_key_issue(key)
    return key, raw_key


def api_key_issue(key: ApiKey) -> str:
    """Give an unsaved key its secret and save it; the raw key is returned, never stored."""
    raw_key = f"pf_{secrets.token_urlsafe(32)}"
    key.prefix, key.key_hash = raw_key[:10], ApiKey.digest(raw_key)
    key.save()
    return raw_key


def api_key_revoke(*, key: ApiKey) -> bool:
    """Revoke the key from now on; False if it was already revoked."""
    return bool(
        ApiKey.objects.filter(pk=key.pk, revoked_at__isnull=True).update(revoked_at=timezone.now())
    )


def job_submit(
    *,
    matter: Matter,
    api_key: ApiKey | None,
    model: str | None = None,
    prompt: str | None = None,
    messages: list[dict] | None = None,
    prompt_token_ids: list[int] | None = None,
    stop: list[str] | None = None,
    request_id: str | None = None,
    directed_by: str = "",
    designation: str = "",
    stream: bool = False,
    caller_waits: bool = False,
    enqueue: bool = True,
    **given,
) -> tuple[GenerationJob, bool]:
    """Check a request (job_input: InvalidInput names the field at fault), store the job and
    queue it once the row is committed. Returns (job, created).

    A request_id already used under the same key returns the existing job instead of a new one.
    caller_waits: the caller holds its connection open until the job ends (a /v1 request, a
    stream). OverCapacity (fair_share) when a cap is met; nothing is stored then. With
    enqueue=False the caller runs the job itself (the `generate` command).
    """
    checked = job_input(
        model=model,
        prompt=prompt,
        messages=messages,
        prompt_token_ids=prompt_token_ids,
        **given,
    )
    if request_id is not None:
        existing = GenerationJob.objects.filter(api_key=api_key, request_id=request_id).first()
        if existing is not None:
            return existing, False
    try:
        with transaction.atomic():
            fair_share.admit(matter=matter, api_key=api_key, caller_waits=caller_waits)
            job = _job_create(
                checked,
                matter=matter,
                api_key=api_key,
                request_id=request_id,
                directed_by=directed_by,
                designation=designation,
                stop=stop,
                stream=stream,
                caller_waits=caller_waits,
            )
            if enqueue:
                transaction.on_commit(lambda: _enqueue(job))
    except IntegrityError:
        # A concurrent request with the same request_id may have won the race.
        winner = GenerationJob.objects.filter(api_key=api_key, request_id=request_id).first()
        if request_id is None or winner is None:
            raise
        return winner, False
    return job, True


def batch_job_create(
    *,
    matter: Matter,
    api_key: ApiKey | None,
    stop=None,
    directed_by: str = "",
    designation: str = "",
    **request,
) -> GenerationJob:
    """A batch line's job (decoding.batches), its request checked as job_submit checks one
    (InvalidInput naming the field), stored queued and not yet sent: the batch feeder sends it,
    so it meets its own cap (PATHFINDER_BATCH_MAX_QUEUED) rather than the matter's."""
    return _job_create(
        job_input(**request),
        matter=matter,
        api_key=api_key,
        stop=stop,
        directed_by=directed_by,
        designation=designation,
    )


def _job_create(checked: JobInput, *, stop: list[str] | None, **fields) -> GenerationJob:
    return GenerationJob.objects.create(
        model_spec=checked.spec,
        prompt_text=checked.prompt.text,
        messages=checked.messages,
        prompt_token_ids=checked.prompt.token_ids,
        stop=stop or [],
        top_logprobs=checked.top_logprobs,
        response_format=checked.response_format,
        **checked.params,
        **fields,
    )


def _enqueue(job: GenerationJob) -> None:
    job_id = job.id
    try:
        delivery.send(job)
    except Exception as exc:
        logger.error("could not queue job", extra={"job_id": str(job_id), "error": str(exc)})
        lifecycle.queue_failed(job_id)
        raise QueueUnavailable(str(exc)) from exc


def jobs_recover() -> int:
    """Hand jobs whose message is lost back to the queue (decoding.delivery): queued ones no
    worker holds that the broker no longer has, running ones whose lease lapsed (their worker
    died). A duplicate message is harmless: running is idempotent."""
    requeued = 0
    for job in delivery.lost(timezone.now()):
        try:
            delivery.send(job)
        except Exception as exc:
            logger.error("could not re-queue job", extra={"job_id": str(job.pk), "error": str(exc)})
            break  # the broker is down; the next sweep tries again
        requeued += 1
    if requeued:
        logger.warning("re-queued jobs whose message was lost", extra={"jobs": requeued})
    return requeued


def trails_seal_orphaned() -> int:
    """Seal the open trails no attempt will seal: a superseded attempt's ("abandoned"), and a
    failed or cancelled job's whose seal failed with the store ("failed" / "cancelled"), so
    every ended attempt is in the ledger and its checkpoints. Open for at least a lease, so a
    live attempt is never raced. Returns how many were sealed."""
    settled = timezone.now() - dt.timedelta(seconds=settings.PATHFINDER_JOB_LEASE_S)
    trails = list(Trail.objects.filter(status=Trail.Status.OPEN, created_at__lt=settled)[:1000])
    jobs = GenerationJob.objects.in_bulk([trail.job_id for trail in trails])
    outcomes = {
        GenerationJob.Status.FAILED: Trail.Outcome.FAILED,
        GenerationJob.Status.CANCELLED: Trail.Outcome.CANCELLED,
    }
    sealed = 0
    for trail in trails:
        job = jobs.get(trail.job_id)
        if job is None:
            continue
        if trail.attempt < job.attempts:
            outcome = Trail.Outcome.ABANDONED
        elif job.status in outcomes:
            outcome = outcomes[job.status]
        else:
            continue  # the attempt may still be running; its lease decides
        trail_seal(trail_id=trail.id, outcome=outcome)
        sealed += 1
    if sealed:
        logger.warning("sealed trails left open by their attempts", extra={"trails": sealed})
    return sealed


def job_retry(*, job: GenerationJob) -> bool:
    """An operator's retry of a failed job: it is queued again and runs as a new attempt with
    a new trail linked to the failed one. False when the job had not failed."""
    reset = lifecycle.failed_requeue(job.pk)
    if reset:
        _enqueue(job)
    return bool(reset)


def job_cancel(*, job: GenerationJob) -> GenerationJob:
    """Cancel a job: a queued one at once (it never runs), a running one at its next step
    boundary (its output is what was recorded; the trail is sealed as cancelled)."""
    now = timezone.now()
    with transaction.atomic():
        GenerationJob.objects.filter(pk=job.pk, cancel_requested_at__isnull=True).update(
            cancel_requested_at=now
        )
        never_ran = lifecycle.queued_cancel(job.pk)
    job.refresh_from_db()
    if job.status in (GenerationJob.Status.SUCCEEDED, GenerationJob.Status.FAILED):
        raise JobFinished(f"the job already {job.status}")
    if never_ran:
        events.publish(job.id)
        logger.info("job cancelled before it ran", extra={"job_id": str(job.id)})
    return job


def job_cancel_quietly(*, job: GenerationJob) -> None:
    """Cancel a job whose caller is gone or gave up; a job already finished, or a store that is
    down (nothing can be cancelled then: the job runs on to its end), is left be."""
    try:
        job_cancel(job=job)
    except JobFinished:
        pass
    except DatabaseError:
        logger.warning(
            "could not cancel the job: audit store unavailable", extra={"job_id": str(job.id)}
        )


def matter_bundle_export(
    *, matter: Matter, since: dt.date | None, until: dt.date | None, out
) -> MatterExport:
    """The bundle of every trail of the matter's jobs submitted from `since` to `until` (UTC
    days, inclusive), written to `out` (audit.matter_export; ExportError when nothing can be
    proven yet)."""
    if since is not None and until is not None and since > until:
        raise ExportError("until: must not be before since")
    selection = MatterSelection(matter=matter.name, since=since, until=until)
    trail_ids = matter_trail_ids(matter, since=since, until=until)
    outside = set(matter_trail_ids(matter)) - set(trail_ids)
    return matter_export(selection=selection, trail_ids=trail_ids, outside=sorted(outside), out=out)


def batch_bundle_export(*, batch: Batch, out) -> MatterExport:
    """A batch produced as one matter bundle (the existing format): every trail of its lines'
    jobs, and the matter's other trails listed as left out, outside the batch."""
    selection = MatterSelection(matter=batch.matter.name, batch=batch.pk)
    trail_ids = batch_trail_ids(batch.pk)
    outside = set(matter_trail_ids(batch.matter)) - set(trail_ids)
    return matter_export(selection=selection, trail_ids=trail_ids, outside=sorted(outside), out=out)


def replay_request(*, job: GenerationJob, user=None) -> Replay:
    """Queue a replay of a finished job (once committed); OverCapacity (fair_share) when the
    reviewer asking has as many in flight as they may."""
    if job.destroyed_at is not None:
        raise ValueError(
            f"this job's texts were destroyed on {job.destroyed_at:%Y-%m-%d} under "
            f"{job.destroyed_under}: there is no prompt left to replay"
        )
    if not replayable(job):
        raise ValueError("only a finished job with a trail can be replayed")
    if user is not None:
        fair_share.admit_replay(user=user)
    replay = Replay.objects.create(job=job, trail_id=job.trail_id, requested_by=user)
    transaction.on_commit(lambda: delivery.send_replay(replay.id))
    return replay


def replayable(job: GenerationJob) -> bool:
    """A finished job (succeeded or failed) with a trail, whose texts were not destroyed."""
    return (
        job.trail_id is not None
        and job.destroyed_at is None
        and job.status
        in (
            GenerationJob.Status.SUCCEEDED,
            GenerationJob.Status.FAILED,
        )
    )

"""Writes for generation jobs and API keys. Views and tasks stay thin and call these."""

from __future__ import annotations

import logging
import secrets
import time
import uuid
from collections.abc import Callable

from django.conf import settings
from django.db import DatabaseError, IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from audit.models import Trail
from audit.store import trail_open, trail_seal
from decoding import events, runtime
from decoding.engine import (
    AuditUnavailable,
    GenerationParams,
    GenerationRequest,
    GenerationResult,
    SpeculativeDecoder,
)
from decoding.models import ApiKey, GenerationJob, Matter, ModelSpec
from decoding.prompts import Prompt
from decoding.sinks import TrailSink
from decoding.text import StopStrings, output_text

logger = logging.getLogger(__name__)

JOB_PARAM_FIELDS = (
    "max_tokens",
    "temperature",
    "top_k",
    "top_p",
    "seed",
    "draft_length",
    "eos_token_id",
)


# A running job looks for a cancel request at a step boundary at most this often (one query).
CANCEL_CHECK_S = 0.2


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
) -> tuple[ApiKey, str]:
    """Create a key for a matter (creating the matter if needed). The raw key is returned once."""
    raw_key = f"pf_{secrets.token_urlsafe(32)}"
    with transaction.atomic():
        matter, _ = Matter.objects.get_or_create(name=matter_name)
        key = ApiKey.objects.create(
            matter=matter,
            name=name,
            prefix=raw_key[:10],
            key_hash=ApiKey.digest(raw_key),
            scopes=list(scopes) if scopes else list(ApiKey.Scope.values),
            expires_at=expires_at,
        )
    return key, raw_key


def api_key_revoke(*, key: ApiKey) -> bool:
    """Revoke the key from now on; False if it was already revoked."""
    return bool(
        ApiKey.objects.filter(pk=key.pk, revoked_at__isnull=True).update(revoked_at=timezone.now())
    )


def job_params(spec: ModelSpec, given: dict) -> dict:
    """The request's decoding parameters: what it gave, else the spec's defaults, else ours."""
    params = {
        "max_tokens": 16,
        "temperature": 1.0,
        "top_k": 0,
        "top_p": 1.0,
        "draft_length": settings.PATHFINDER_DEFAULT_DRAFT_LENGTH,
        "eos_token_id": _default_eos(spec),
        **{k: v for k, v in (spec.default_params or {}).items() if k in JOB_PARAM_FIELDS},
        **given,
    }
    if params.get("seed") is None:
        # Every job has a seed, so every job can be replayed.
        params["seed"] = secrets.randbelow(2**53)
    params["max_tokens"] = min(params["max_tokens"], settings.PATHFINDER_MAX_OUTPUT_TOKENS)
    params["draft_length"] = min(params["draft_length"], settings.PATHFINDER_MAX_DRAFT_LENGTH)
    return params


def _default_eos(spec: ModelSpec) -> int | None:
    tokenizer = runtime.tokenizer_for(spec)
    return tokenizer.eos_token_id if tokenizer is not None else None


def job_submit(
    *,
    matter: Matter,
    api_key: ApiKey | None,
    spec: ModelSpec,
    prompt: Prompt,
    messages: list[dict] | None = None,
    stop: list[str] | None = None,
    request_id: str | None = None,
    stream: bool = False,
    enqueue: bool = True,
    **given,
) -> tuple[GenerationJob, bool]:
    """Store a job and queue it once the row is committed. Returns (job, created).

    A request_id already used under the same key returns the existing job instead of a new one.
    With enqueue=False the caller runs the job itself (the `generate` command).
    """
    if request_id is not None:
        existing = GenerationJob.objects.filter(api_key=api_key, request_id=request_id).first()
        if existing is not None:
            return existing, False
    try:
        with transaction.atomic():
            job = GenerationJob.objects.create(
                matter=matter,
                api_key=api_key,
                request_id=request_id,
                model_spec=spec,
                prompt_text=prompt.text,
                messages=messages,
                prompt_token_ids=prompt.token_ids,
                stop=stop or [],
                stream=stream,
                **job_params(spec, given),
            )
            if enqueue:
                transaction.on_commit(lambda: _enqueue(job.id))
    except IntegrityError:
        # A concurrent request with the same request_id may have won the race.
        winner = GenerationJob.objects.filter(api_key=api_key, request_id=request_id).first()
        if request_id is None or winner is None:
            raise
        return winner, False
    return job, True


def _enqueue(job_id: uuid.UUID) -> None:
    from decoding.tasks import run_generation

    try:
        run_generation.delay(str(job_id))
    except Exception as exc:
        logger.error("could not queue job", extra={"job_id": str(job_id), "error": str(exc)})
        GenerationJob.objects.filter(pk=job_id, status=GenerationJob.Status.QUEUED).update(
            status=GenerationJob.Status.FAILED,
            error=f"the job queue is unavailable: {exc}",
            finished_at=timezone.now(),
        )
        raise QueueUnavailable(str(exc)) from exc


def job_run(*, job_id: uuid.UUID) -> None:
    """Decode one job on this worker. Safe to call twice: only the caller that claims it runs it."""
    claimed = GenerationJob.objects.filter(pk=job_id, status=GenerationJob.Status.QUEUED).update(
        status=GenerationJob.Status.RUNNING,
        started_at=timezone.now(),
        attempts=F("attempts") + 1,
    )
    if not claimed:
        logger.info("job already claimed or finished", extra={"job_id": str(job_id)})
        return
    job = GenerationJob.objects.select_related("model_spec").get(pk=job_id)
    trail = trail_open(job_id=job.id, attempt=job.attempts)
    GenerationJob.objects.filter(pk=job.id).update(trail_id=trail.id)
    try:
        models, load_ms = runtime.models_for(job.model_spec)
        GenerationJob.objects.filter(pk=job.id).update(load_ms=round(load_ms, 1))
        decoder = SpeculativeDecoder(
            drafter=models.drafter,
            target=models.target,
            sink=TrailSink(trail.id),
            tokenizer=models.tokenizer,
        )
        schedule = models.schedule(job.draft_length)
        stop = StopStrings(models.tokenizer, job.stop) if job.stop else None
        # A stream's steps are committed one by one and announced; otherwise records batch.
        announce = (lambda record: events.publish(job.id)) if job.stream else None
        result = decoder.generate(
            request_for(job),
            schedule=schedule,
            stop=stop,
            on_step=announce,
            cancelled=_cancel_requested(job.id),
        )
    except AuditUnavailable as exc:
        cause = exc.__cause__ or exc
        _fail(job, trail, f"audit store unavailable, no output released: {cause}")
        return
    except Exception as exc:
        logger.exception("generation failed", extra={"job_id": str(job.id)})
        _fail(job, trail, f"generation failed: {exc}")
        return
    _succeed(job, trail, result, output_text(models.tokenizer, result.output_token_ids, job.stop))


def _cancel_requested(job_id: uuid.UUID) -> Callable[[], bool]:
    """The engine's cancel check: one indexed read, at most every CANCEL_CHECK_S seconds."""
    last = time.monotonic()

    def cancelled() -> bool:
        nonlocal last
        if time.monotonic() - last < CANCEL_CHECK_S:
            return False
        last = time.monotonic()
        return GenerationJob.objects.filter(pk=job_id, cancel_requested_at__isnull=False).exists()

    return cancelled


def job_cancel(*, job: GenerationJob) -> GenerationJob:
    """Cancel a job: a queued one at once (it never runs), a running one at its next step
    boundary (its output is what was recorded; the trail is sealed as cancelled)."""
    now = timezone.now()
    with transaction.atomic():
        GenerationJob.objects.filter(pk=job.pk, cancel_requested_at__isnull=True).update(
            cancel_requested_at=now
        )
        never_ran = GenerationJob.objects.filter(
            pk=job.pk, status=GenerationJob.Status.QUEUED
        ).update(status=GenerationJob.Status.CANCELLED, finished_at=now)
    job.refresh_from_db()
    if job.status in (GenerationJob.Status.SUCCEEDED, GenerationJob.Status.FAILED):
        raise JobFinished(f"the job already {job.status}")
    if never_ran:
        events.publish(job.id)
        logger.info("job cancelled before it ran", extra={"job_id": str(job.id)})
    return job


def job_metrics(step_counts) -> dict:
    """Per-request speculation: what each step drafted and kept, the acceptance rate of each
    draft position, and how often each accepted length occurred."""
    drafted = [k for k, _ in step_counts]
    accepted = [a for _, a in step_counts]
    longest = max(drafted, default=0)
    by_position = []
    for position in range(1, longest + 1):
        tried = sum(1 for k in drafted if k >= position)
        kept = sum(1 for a in accepted if a >= position)
        by_position.append(
            {
                "position": position,
                "drafted": tried,
                "accepted": kept,
                "rate": round(kept / tried, 6),
            }
        )
    histogram = [0] * (longest + 1)
    for a in accepted:
        histogram[a] += 1
    return {
        "drafted_per_step": drafted,
        "accepted_per_step": accepted,
        "acceptance_by_position": by_position,
        "accepted_length_histogram": histogram,
    }


def request_for(job: GenerationJob) -> GenerationRequest:
    """The engine request a job stands for (also what a replay re-runs)."""
    params = GenerationParams(**{name: getattr(job, name) for name in JOB_PARAM_FIELDS})
    return GenerationRequest(
        request_id=str(job.id), prompt_token_ids=tuple(job.prompt_token_ids), params=params
    )


def _succeed(job: GenerationJob, trail: Trail, result: GenerationResult, text: str) -> None:
    # The output appears in the same transaction that seals the trail whose records justify it.
    cancelled = result.stop_reason == "cancelled"
    with transaction.atomic():
        trail_seal(
            trail_id=trail.id,
            outcome=Trail.Outcome.CANCELLED if cancelled else Trail.Outcome.SUCCEEDED,
        )
        GenerationJob.objects.filter(pk=job.id).update(
            status=GenerationJob.Status.CANCELLED if cancelled else GenerationJob.Status.SUCCEEDED,
            output_token_ids=list(result.output_token_ids),
            output_text=text,
            stop_reason=result.stop_reason,
            steps=result.steps,
            drafted=result.drafted,
            accepted=result.accepted,
            prefill_ms=round(result.prefill_ns / 1e6, 1),
            decode_ms=round(result.decode_ns / 1e6, 1),
            audit_ms=round(result.audit_ns / 1e6, 1),
            metrics=job_metrics(result.step_counts),
            finished_at=timezone.now(),
        )
    events.publish(job.id)
    logger.info(
        "job cancelled" if cancelled else "job succeeded",
        extra={
            "job_id": str(job.id),
            "request_id": job.request_id,
            "trail_id": str(trail.id),
            "tokens": len(result.output_token_ids),
            "acceptance_rate": round(result.acceptance_rate, 4),
        },
    )


def _fail(job: GenerationJob, trail: Trail, reason: str) -> None:
    try:
        trail_seal(trail_id=trail.id, outcome=Trail.Outcome.FAILED)
    except DatabaseError:
        # The store that refused the records may refuse the seal too; the open trail still
        # verifies up to its last committed record.
        logger.warning("could not seal failed trail", extra={"trail_id": str(trail.id)})
    GenerationJob.objects.filter(pk=job.id).update(
        status=GenerationJob.Status.FAILED, error=reason, finished_at=timezone.now()
    )
    events.publish(job.id)
    logger.warning("job failed", extra={"job_id": str(job.id), "error": reason})

"""Running a job on a worker: claim it under a lease, decode, and write the result once.

Delivery is at least once (acks_late, a redelivered or re-queued message), so running is
idempotent: the first delivery claims the job (attempt 1) and holds a lease it renews while it
decodes. A later delivery finds the job either finished (nothing to do), still leased (its worker
is alive: try again once the lease could have lapsed), or leased out (its worker died): then the
old attempt's trail is sealed "abandoned" and a new attempt starts with a new trail that links
to it, up to PATHFINDER_MAX_ATTEMPTS. Every write of a result is conditional on still owning the
attempt, so a job never has two outputs.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import time
import uuid
from collections.abc import Callable

from django.conf import settings
from django.db import DatabaseError, transaction
from django.utils import timezone

from audit.evidence import binding, decision_rule
from audit.models import Trail
from audit.store import trail_append, trail_open, trail_seal
from decoding import events, fair_share, lifecycle, metrics
from decoding.claims import job_generation_params, job_request_payload
from decoding.engine import (
    AuditUnavailable,
    GenerationRequest,
    GenerationResult,
    ResponseFormat,
    SpeculativeDecoder,
)
from decoding.models import BatchLine, GenerationJob
from decoding.text import StopStrings, output_text
from decoding.worker import forgetting, references, runtime
from decoding.worker.leases import LEASES, LostOwnership, Watch
from decoding.worker.sinks import sink_for

logger = logging.getLogger(__name__)


class TryLater(Exception):
    """The job cannot start on this delivery; deliver it again after `retry_in` seconds."""

    def __init__(self, message: str, retry_in: float):
        super().__init__(message)
        self.retry_in = retry_in


class LeaseHeld(TryLater):
    """Another attempt holds the job and may be alive; look again once its lease could lapse."""

    def __init__(self, retry_in: float):
        super().__init__(f"job leased for another {retry_in:.1f} s", retry_in)


def _worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def job_run(*, job_id: uuid.UUID) -> None:
    """Decode one job on this worker. Safe to call for any delivery of the job's message.
    TryLater when it cannot start now: a live attempt holds it, or this worker's last sequence
    slot is kept for another matter's waiting job (decoding.worker.runtime.matter_slot)."""
    matter_id = GenerationJob.objects.filter(pk=job_id).values_list("matter_id", flat=True).first()
    if matter_id is None:
        return
    try:
        with runtime.matter_slot(matter_id, fair_share.others_waiting):
            _run(job_id)
    except runtime.NoFairSlot as kept:
        raise TryLater(str(kept), 0) from kept


def _run(job_id: uuid.UUID) -> None:
    warmed_ms = _load_before_claiming(job_id)
    claim = _claim(job_id)
    if claim is None:
        return
    job, trail = claim
    attempt = job.attempts
    metrics.job_started((timezone.now() - job.created_at).total_seconds())
    try:
        models, load_ms = runtime.models_for(job.model_spec)
    except Exception as exc:  # a file gone, a package missing, no memory: the log says which
        logger.exception("the job's models did not load", extra=_log(job, attempt))
        _fail(job, attempt, trail, GenerationJob.Failure.MODEL_UNAVAILABLE, exc)
        return
    try:
        forgetting.catch_up(job.matter)  # nothing the matter's destroyed jobs left is reused
        load_ms += warmed_ms
        lifecycle.owned(job.id, attempt).update(
            load_ms=round(load_ms, 1), lease_expires_at=lifecycle.lease_until()
        )
        # The question is on record before the first decision about it.
        request = trail_append(trail_id=trail.id, payload=job_request_payload(job, trail, models))
        stop = StopStrings(models.tokenizer, job.stop) if job.stop else None
        # A stream's reader is told after each step's commit; other jobs' records are committed
        # STEPS_PER_COMMIT steps at a time.
        announce = (lambda: events.publish(job.id)) if job.stream else None
        head = (request.seq + 1, request.record_hash)
        # A slot of the worker's sequence engine, held while the job decodes
        # (decoding.worker.runtime); a Batch API line's steps yield to interactive jobs'.
        with (
            LEASES.watching(job.id, attempt) as watch,
            models.sequence(
                wall=job.matter_id, background=fair_share.is_batch_line(job.id)
            ) as target,
            sink_for(
                trail.id,
                head=head,
                salt=trail.salt,
                format_version=trail.format_version,
                committed=announce,
            ) as sink,
        ):
            schedule = models.schedule(job.draft_length, target, wall=job.matter_id)
            decoder = SpeculativeDecoder(
                drafter=models.job_drafter(job.matter_id),
                target=target,
                sink=sink,
                tokenizer=models.tokenizer,
            )
            result = decoder.generate(
                request_for(job, format_version=trail.format_version),
                schedule=schedule,
                stop=stop,
                cancelled=_step_boundary(watch),
                references=references.references_for(job.matter_id, excluding=str(job.id))
                if models.drafts_from_references
                else (),
            )
    except LostOwnership:
        logger.warning("attempt lost its job; stopping", extra=_log(job, attempt))
        return
    except (AuditUnavailable, DatabaseError) as exc:
        _fail(job, attempt, trail, GenerationJob.Failure.AUDIT_UNAVAILABLE, exc.__cause__ or exc)
        return
    except Exception as exc:
        logger.exception("generation failed", extra=_log(job, attempt))
        _fail(job, attempt, trail, GenerationJob.Failure.GENERATION_FAILED, exc)
        return
    answer = binding.Answer(
        token_ids=result.output_token_ids,
        text=output_text(models.tokenizer, result.output_token_ids, job.stop),
        stop_reason=result.stop_reason,
    )
    try:
        _succeed(job, attempt, trail, result, answer)
    except DatabaseError as exc:
        _fail(job, attempt, trail, GenerationJob.Failure.AUDIT_UNAVAILABLE, exc)


def _load_before_claiming(job_id: uuid.UUID) -> float:
    """Load the job's models (ms spent; 0 when warm or nothing to run) before an attempt holds
    its lease: a first load (weights, hashes, the default file made, the verify-cost curve)
    can take longer than the lease, and another delivery would then take over a live attempt.
    A load that fails is left to the attempt, which loads again and fails with the reason."""
    job = (
        GenerationJob.objects.select_related("model_spec")
        .filter(pk=job_id)
        .exclude(status__in=GenerationJob.FINISHED)
        .first()
    )
    if job is None:
        return 0.0
    try:
        return runtime.models_for(job.model_spec)[1]
    except Exception:
        return 0.0


def _claim(job_id: uuid.UUID) -> tuple[GenerationJob, Trail] | None:
    """Start an attempt on the job, or None when there is nothing to run. LeaseHeld when a
    live attempt may still hold it."""
    with transaction.atomic():
        job = (
            GenerationJob.objects.select_for_update()
            .select_related("model_spec", "matter")
            .filter(pk=job_id)
            .first()
        )
        if job is None or job.status in GenerationJob.FINISHED:
            return None
        previous_trail = job.trail_id
        if job.status == GenerationJob.Status.RUNNING:
            now = timezone.now()
            if job.lease_expires_at is not None and job.lease_expires_at > now:
                raise LeaseHeld((job.lease_expires_at - now).total_seconds())
            if previous_trail is not None:
                trail_seal(trail_id=previous_trail, outcome=Trail.Outcome.ABANDONED)
            logger.warning("worker lost mid-job; its trail sealed abandoned", extra=_log(job))
            ended = lifecycle.lost_job_end(job)
            if ended:
                metrics.job_finished(ended)
                transaction.on_commit(lambda: events.publish(job_id))
                return None
        trail = trail_open(
            job_id=job.id,
            attempt=job.attempts + 1,
            previous_id=previous_trail,
            batch_id=BatchLine.objects.filter(job=job).values_list("batch_id", flat=True).first()
            or "",
        )
        if not lifecycle.attempt_start(job, trail_id=trail.id, worker=_worker_name()):
            # Another delivery started it first (SQLite takes no row lock): never two attempts.
            transaction.set_rollback(True)
            return None
    logger.info("job claimed", extra=_log(job, job.attempts))
    return job, trail


class TimeLimitReached(Exception):
    """The attempt decoded for longer than PATHFINDER_TASK_TIME_LIMIT seconds."""


def _step_boundary(watch: Watch) -> Callable[[], bool]:
    """The engine's check between steps: whether a cancel was requested; stop if this attempt
    lost the job (decoding.worker.leases, which also renews its lease) or ran out of time. The time
    limit is kept here because a worker decoding several jobs runs them in threads, which
    Celery's time limits cannot stop; a prefork worker's hard limit stays as the backstop for a
    native call that never returns."""
    started = time.monotonic()
    limit = settings.CELERY_TASK_TIME_LIMIT

    def cancelled() -> bool:
        if time.monotonic() - started > limit:
            raise TimeLimitReached(f"decoding ran past the time limit of {limit} s")
        return watch.step()

    return cancelled


def request_for(job: GenerationJob, *, format_version: int) -> GenerationRequest:
    """The engine request a job stands for under a trail of that audit format (also what a
    replay re-runs): format 5 samples with coupled draws (decision_rule.COUPLED_SINCE)."""
    return GenerationRequest(
        request_id=str(job.id),
        prompt_token_ids=tuple(job.prompt_token_ids),
        params=job_generation_params(job),
        top_logprobs=job.top_logprobs,
        coupled=format_version >= decision_rule.COUPLED_SINCE,
        response_format=ResponseFormat.from_stored(job.response_format),
    )


def _succeed(
    job: GenerationJob, attempt: int, trail: Trail, result: GenerationResult, answer
) -> None:
    # The output appears in the same transaction that records the answer and seals the trail
    # whose records justify it, and only while this attempt owns the job.
    cancelled = result.stop_reason == "cancelled"
    with transaction.atomic():
        status = lifecycle.attempt_finish(
            job.id,
            attempt,
            cancelled=cancelled,
            output_token_ids=list(answer.token_ids),
            output_text=answer.text,
            stop_reason=answer.stop_reason,
            steps=result.steps,
            drafted=result.drafted,
            accepted=result.accepted,
            prefill_ms=round(result.prefill_ns / 1e6, 1),
            cached_prompt_tokens=result.cached_prompt_tokens,
            decode_ms=round(result.decode_ns / 1e6, 1),
            audit_ms=round(result.audit_ns / 1e6, 1),
            metrics=job_metrics(result.step_counts),
        )
        if status is None:
            # Another attempt took the job over; its output, not this one, is the job's.
            transaction.set_rollback(True)
            logger.warning("attempt finished after losing its job", extra=_log(job, attempt))
            return
        trail_append(
            trail_id=trail.id,
            payload=binding.answer_payload(
                trail_salt=trail.salt,
                answer=answer,
                steps=result.steps,
                format_version=trail.format_version,
            ),
        )
        trail_seal(
            trail_id=trail.id,
            outcome=Trail.Outcome.CANCELLED if cancelled else Trail.Outcome.SUCCEEDED,
        )
    references.remember(
        job.matter_id, str(job.id), [*job.prompt_token_ids, *result.output_token_ids]
    )
    metrics.job_decoded(result)
    metrics.job_finished(status)
    events.publish(job.id)
    logger.info(
        "job cancelled" if cancelled else "job succeeded",
        extra={
            **_log(job, attempt),
            "trail_id": str(trail.id),
            "tokens": len(result.output_token_ids),
            "acceptance_rate": round(result.acceptance_rate, 4),
        },
    )


def _fail(
    job: GenerationJob, attempt: int, trail: Trail, failure: str, cause: BaseException
) -> None:
    """Fail the attempt: the job says which failure (its label), the log says the cause."""
    with contextlib.suppress(DatabaseError):
        # The store that refused the records may refuse the seal too; the open trail still
        # verifies up to its last committed record (and the recovery sweep seals it).
        trail_seal(trail_id=trail.id, outcome=Trail.Outcome.FAILED)
    failed = lifecycle.attempt_fail(job.id, attempt, failure)
    if failed:
        metrics.job_finished(GenerationJob.Status.FAILED)
        events.publish(job.id)
    logger.warning(
        "job failed", extra={**_log(job, attempt), "failure": failure, "cause": str(cause)}
    )


def _log(job: GenerationJob, attempt: int | None = None) -> dict:
    fields = {"job_id": str(job.id), "request_id": job.request_id}
    if attempt is not None:
        fields["attempt"] = attempt
    return fields


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

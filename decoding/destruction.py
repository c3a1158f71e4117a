"""Destroying the content decoding keeps for a set of finished jobs: the texts and token ids on
each job row (a structured output's schema among them), what was computed from them (step
counts, cached-prompt counts, batch feed keys, a replay's first divergence), and the Batch API
files that hold any of them. Called inside the destruction's transaction (reviewers.destruction),
which also erases the trails (audit.erasure) and records the event; a worker forgets the
matter's cached state when told (decoding.worker.forgetting).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime

from celery import current_app
from django.conf import settings
from django.db.models import Q

from decoding.models import Batch, BatchFile, BatchFilePart, BatchLine, GenerationJob, Replay

logger = logging.getLogger(__name__)


@dataclass
class Erased:
    """What decoding destroyed, for the destruction event."""

    jobs: list[str] = field(default_factory=list)
    replays: int = 0
    batch_lines: int = 0
    files: list[str] = field(default_factory=list)


def unfinished(jobs) -> list[str]:
    """Ids of the jobs that still run or wait (their texts are in use)."""
    return [
        str(pk)
        for pk in jobs.exclude(status__in=GenerationJob.FINISHED).values_list("pk", flat=True)
    ]


def erase_jobs(jobs, *, at: datetime, order: str, whole_matter_id: int | None = None) -> Erased:
    """Destroy the content of `jobs` (a queryset of finished, not yet destroyed jobs: the
    caller refuses unfinished ones, naming them). With `whole_matter_id`, every Batch API file
    of that matter goes too, a job's or not; otherwise the files that hold any of the jobs'
    lines."""
    erased = Erased(jobs=[str(pk) for pk in jobs.values_list("pk", flat=True)])
    ids = erased.jobs
    GenerationJob.objects.filter(pk__in=ids).update(
        prompt_text="",
        messages=None,
        prompt_token_ids=[],
        output_token_ids=[],
        output_text="",
        response_format="",  # a schema's names and enums are the matter's words too
        metrics={},
        cached_prompt_tokens=None,
        destroyed_at=at,
        destroyed_under=order,
    )
    # A divergence quotes the differing tokens and text; the per-step comparison does not.
    erased.replays = Replay.objects.filter(job_id__in=ids).update(first_divergence=None)
    lines = BatchLine.objects.filter(job_id__in=ids)
    erased.batch_lines = lines.update(feed_key=b"")
    batches = Batch.objects.filter(pk__in=lines.values("batch_id"))
    if whole_matter_id is not None:
        files = BatchFile.objects.filter(matter_id=whole_matter_id)
        batches = Batch.objects.filter(matter_id=whole_matter_id)
    else:
        files = BatchFile.objects.filter(
            Q(pk__in=batches.values("input_file_id"))
            | Q(pk__in=batches.values("output_file_id"))
            | Q(pk__in=batches.values("error_file_id"))
        )
    # A finished batch's feed position is a key of one of its lines' prompts.
    batches.filter(status__in=Batch.ENDED).update(sent_through_key=b"")
    files = files.filter(destroyed_at__isnull=True)
    erased.files = sorted(files.values_list("pk", flat=True))
    BatchFilePart.objects.filter(file_id__in=erased.files).delete()
    BatchFile.objects.filter(pk__in=erased.files).update(destroyed_at=at, destroyed_under=order)
    return erased


def tell_workers(matter_id: int) -> int | None:
    """Broadcast `forget_matter` (pathfinder_site.celery) to every worker; how many answered
    (None: the broker could not be asked). A worker that did not answer forgets before its
    next job of the matter (decoding.worker.forgetting)."""
    arguments = {"matter_id": matter_id, "queue": settings.CELERY_TASK_DEFAULT_QUEUE}
    try:
        replies = current_app.control.broadcast(
            "forget_matter", arguments=arguments, reply=True, timeout=2.0
        )
    except Exception as exc:
        logger.warning("could not tell the workers to forget", extra={"error": str(exc)})
        return None
    answers = [answer for reply in replies or () for answer in reply.values()]
    return sum(isinstance(a, dict) and a.get("ok") == "forgotten" for a in answers)

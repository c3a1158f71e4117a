"""Fair share: how much of the service one key or one matter may hold at once, and the order in
which matters' jobs reach the workers.

The caps are counted in the database, under a lock on the key's or matter's row, so they hold
across every web process; a refused request changes nothing and is told which cap it met and
when to try again (429, Retry-After).
"""

from __future__ import annotations

import statistics

from django.conf import settings

from decoding.models import ApiKey, BatchLine, GenerationJob, Matter, Replay

RETRY_AFTER_DEFAULT_S = 5


class OverCapacity(Exception):
    """A cap was met: `setting` names it, `retry_after_s` says when a slot is likely free."""

    def __init__(self, setting: str, message: str, retry_after_s: int):
        super().__init__(f"{setting}: {message}")
        self.setting = setting
        self.retry_after_s = retry_after_s


def admit(*, matter: Matter, api_key: ApiKey | None, caller_waits: bool) -> None:
    """Raise OverCapacity if one more job of this matter (waited on by its caller, or not)
    would exceed a cap. Call it inside the transaction that creates the job: it locks the rows
    whose jobs it counts, so two concurrent requests cannot both take the last slot."""
    Matter.objects.select_for_update().filter(pk=matter.pk).first()
    queued = interactive_jobs().filter(matter=matter, status=GenerationJob.Status.QUEUED)
    cap = settings.PATHFINDER_MATTER_MAX_QUEUED
    if queued.count() >= cap:
        raise OverCapacity(
            "PATHFINDER_MATTER_MAX_QUEUED",
            f"this matter already has {cap} jobs queued; retry once some have started.",
            _retry_after(GenerationJob.objects.filter(matter=matter)),
        )
    if not caller_waits or api_key is None:
        return
    ApiKey.objects.select_for_update().filter(pk=api_key.pk).first()
    waiting = GenerationJob.objects.filter(api_key=api_key, caller_waits=True).exclude(
        status__in=GenerationJob.FINISHED
    )
    cap = settings.PATHFINDER_KEY_MAX_WAITING
    if waiting.count() >= cap:
        raise OverCapacity(
            "PATHFINDER_KEY_MAX_WAITING",
            f"this key already has {cap} requests waiting for their jobs or streaming them; "
            "retry when one has finished.",
            _retry_after(GenerationJob.objects.filter(api_key=api_key)),
        )


def admit_replay(*, user) -> None:
    """Raise OverCapacity if this reviewer already has PATHFINDER_REVIEWER_MAX_REPLAYS replays
    queued or running (each re-decodes a whole job on a worker). Inside the transaction that
    creates the replay: it locks the user's row."""
    from django.contrib.auth import get_user_model

    get_user_model().objects.select_for_update().filter(pk=user.pk).first()
    in_flight = Replay.objects.filter(
        requested_by=user, status__in=(Replay.Status.QUEUED, Replay.Status.RUNNING)
    )
    cap = settings.PATHFINDER_REVIEWER_MAX_REPLAYS
    if in_flight.count() >= cap:
        raise OverCapacity(
            "PATHFINDER_REVIEWER_MAX_REPLAYS",
            f"you already have {cap} replays queued or running; start another when one is done.",
            RETRY_AFTER_DEFAULT_S,
        )


def is_batch_line(job_id) -> bool:
    """Whether the job is a batch line (decoding.batches): behind its matter's calls in the
    queue, and behind interactive jobs in a worker's passes
    (decoding.engine.providers.llamacpp_batch)."""
    return BatchLine.objects.filter(job_id=job_id).exists()


def queue_priority(job: GenerationJob) -> int:
    """The job's place in the queue: how many other interactive jobs of its matter are queued or
    running (fewer go first), so a matter with a backlog cannot hold back another's first job by
    more than about one job. A batch line goes one place behind its matter's next call: behind
    its own matter's calls (which the feeder also waits for), and between matters in turn like
    any call, so no matter's load, however steady, holds another's batch back for good."""
    lowest = settings.PATHFINDER_QUEUE_PRIORITIES - 1  # Redis: 0 goes first
    in_flight = (
        interactive_jobs()
        .filter(matter_id=job.matter_id)
        .exclude(status__in=GenerationJob.FINISHED)
        .exclude(pk=job.pk)
        .count()
    )
    if is_batch_line(job.pk):
        return min(in_flight + 1, lowest)
    return min(in_flight, lowest - 1)


def others_waiting(matter_id) -> bool:
    """Whether another matter has an interactive job queued: then a matter holding every other
    sequence slot of a worker may not take its last (decoding.worker.runtime.matter_slot), so a
    backlog cannot hold a whole batch while another matter waits."""
    return (
        interactive_jobs()
        .filter(status=GenerationJob.Status.QUEUED)
        .exclude(matter_id=matter_id)
        .exists()
    )


def interactive_jobs():
    """Jobs that are not a batch's lines (those meet PATHFINDER_BATCH_MAX_QUEUED instead, in
    decoding.batches, and a matter's are sent only while none of its own is queued)."""
    return GenerationJob.objects.filter(batch_line__isnull=True)


def _retry_after(jobs) -> int:
    """Seconds a typical recent job of these took from start to finish (at least 1)."""
    recent = (
        jobs.filter(finished_at__isnull=False, started_at__isnull=False)
        .order_by("-finished_at")
        .values_list("started_at", "finished_at")[:20]
    )
    seconds = [(finished - started).total_seconds() for started, finished in recent]
    if not seconds:
        return RETRY_AFTER_DEFAULT_S
    return max(1, round(statistics.median(seconds)))

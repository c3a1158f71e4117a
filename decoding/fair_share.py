"""Fair share: who runs next. Every rule of it, numbered as docs/fair-share.md sets them out and
says how they combine: what one key, matter or reviewer may hold at once (1), a web process's
wait slots between matters (2), the queue's order (3), the Batch API feed's turns (4), and a
worker's last sequence slot (6). Rule 5 (which worker holds a document) is decoding.affinity's;
rule 7 (a Batch API line's step yields to interactive ones inside a pass) is the engine's
(decoding.engine.providers.llamacpp_sequences, BACKGROUND_WAIT_S), which imports no Django.

The rules that count are counted in the database, under a lock on the key's, matter's or user's
row, so they hold across every web process; a refused request changes nothing and is told which
cap it met and when to try again (429, Retry-After). The rules over a process's own counts
(2 and 6) are pure functions here, and the process that holds the counts asks them.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

from django.conf import settings

from decoding.models import ApiKey, BatchLine, GenerationJob, Matter, Replay

RETRY_AFTER_DEFAULT_S = 5
Turn = TypeVar("Turn")


class OverCapacity(Exception):
    """A cap was met: `setting` names it, `retry_after_s` says when a slot is likely free."""

    def __init__(self, setting: str, message: str, retry_after_s: int):
        super().__init__(f"{setting}: {message}")
        self.setting = setting
        self.retry_after_s = retry_after_s


# --- 1. What one key, matter or reviewer may hold at once -----------------------------------


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


# --- 2. A web process's wait slots --------------------------------------------------------------


def may_take_wait_slot(held: Mapping[object, int], matter, size: int) -> bool:
    """Whether `matter` may take one more of a web process's `size` wait slots
    (PATHFINDER_WEB_MAX_WAITING), `held` being the slots each matter holds now. A matter holding
    none takes any free slot; one holding some takes another while it holds fewer than an equal
    share, between the matters holding slots, of all but a quarter of them (at least one). So a
    matter alone holds three quarters at most, a second matter's calls take the rest at once,
    and as the first's waits end the two shares even out."""
    shared = size - max(1, size // 4)
    mine = held.get(matter, 0)
    holders = sum(1 for count in held.values() if count)
    if sum(held.values()) >= size:
        return False
    return not mine or mine < shared // holders


# --- 3. The queue's order --------------------------------------------------------------------


def is_batch_line(job_id) -> bool:
    """Whether the job is a batch line (decoding.batches): behind its matter's calls in the
    queue, and behind interactive jobs in a worker's passes
    (decoding.engine.providers.llamacpp_sequences)."""
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


# --- 4. The Batch API feed's turns -------------------------------------------------------------


def matters_with_calls_queued() -> set:
    """The matters with an interactive job queued: the feed skips their batches (within a
    matter, interactive first)."""
    queued = interactive_jobs().filter(status=GenerationJob.Status.QUEUED)
    return set(queued.values_list("matter_id", flat=True).distinct())


def in_turn(turns: Mapping[object, Sequence[Turn]], free: int) -> list[Turn]:
    """Up to `free` turns, one of each matter's in turn (`turns`: each matter's next turns, in
    its order), so no matter's backlog holds another's lines back."""
    queues = [list(matter_turns) for matter_turns in turns.values()]
    picked: list[Turn] = []
    while len(picked) < free and any(queues):
        for queue in queues:
            if queue and len(picked) < free:
                picked.append(queue.pop(0))
    return picked


# --- 6. A worker's last sequence slot ---------------------------------------------------------


def keeps_last_slot(
    sequences: int, held: Mapping[object, int], matter, others_waiting: Callable[[object], bool]
) -> bool:
    """Whether a worker of `sequences` slots, `held` being its running jobs by matter, keeps its
    last free slot from `matter`: so when the matter holds every other slot and another matter
    has an interactive job queued (others_waiting, asked last: it reads the database)."""
    busy = sum(held.values())
    return 1 < sequences == busy + 1 and held.get(matter, 0) == busy and others_waiting(matter)


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

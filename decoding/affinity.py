"""Which queue a job's message goes to when several workers serve: the queue of the worker that
holds its document.

A worker keeps the documents it evaluated (its slots and its prompt cache, each behind its
matter's wall). Sent to whichever worker is free, a document's questions are each evaluated
where they land; sent to one worker, the document is evaluated once and its questions decode in
the same passes. So a job whose prompt holds a document (a 64-token block or more:
decoding.feed_order) goes to the queue of one live worker, chosen by rendezvous hashing of its
matter and its document: the same worker for every question while that worker lives, about 1/n
of the documents for each of n workers, and only the gone worker's share moved when one comes or
goes. Each worker consumes its own queue beside the shared one (pathfinder_site.celery).

Bounds. Keeping a document together never leaves a worker idle: when the document's worker is
busy and another holds nothing, the next idle worker in the document's order takes the job;
jobs routed at the same moment each claim a different idle worker (until it marks the job
received), so questions asked at once spread over the idle workers. A
worker with PATHFINDER_WORKER_SEQUENCES messages already waiting in its own queue gets no more:
the job goes to the shared queue, which the first free worker takes from, so a hot document
spreads over the workers rather than queueing behind itself. A worker that holds nothing takes
what waits in a busy worker's queue (decoding.delivery.take_waiting). A worker is live while it
renews its presence (decoding.delivery.Holder, with its marks); one that stops gets no new jobs,
and the recovery sweep sends what waits in its queue again (decoding.delivery.lost). Priorities
hold across a worker's queues (kombu reads every queue's highest step first). With one worker,
or a broker other than Redis (the embedded default), every job goes to the shared queue.
docs/adr/0028-document-affinity-across-workers.md sets out the design for many machines.
"""

from __future__ import annotations

import hashlib
import time

from celery import current_app
from django.conf import settings
from django.db.models import Count
from django.utils import timezone

from decoding.feed_order import document_digest
from decoding.models import GenerationJob

# A worker's presence lasts this long; it renews it with its marks, four times as often.
PRESENCE_S = 20
# A claim on an idle worker lasts until it marks the job received, or this long at most.
CLAIM_MS = 5000


def worker_queue(worker: str) -> str:
    """The queue only `worker` (its Celery hostname) consumes."""
    return f"{settings.CELERY_TASK_DEFAULT_QUEUE}.{worker}"


def presence_key() -> str:
    """The Redis hash of live workers: Celery hostname -> until when (Unix seconds)."""
    return f"{settings.CELERY_TASK_DEFAULT_QUEUE}.workers"


def enabled() -> bool:
    return settings.PATHFINDER_DOCUMENT_AFFINITY and settings.CELERY_BROKER_URL.startswith("redis")


def announce(worker: str) -> None:
    """`worker` is live for PRESENCE_S more seconds."""
    if enabled():
        with current_app.connection_for_write() as connection:
            client = connection.default_channel.client
            client.hset(presence_key(), worker, time.time() + PRESENCE_S)


def withdraw(worker: str) -> None:
    """`worker` is stopping: no new job goes to its queue."""
    if enabled():
        with current_app.connection_for_write() as connection:
            connection.default_channel.client.hdel(presence_key(), worker)


def workers(client) -> tuple[list[str], list[str]]:
    """(live workers, workers whose presence lapsed), by Celery hostname."""
    now = time.time()
    live, lapsed = [], []
    for name, until in client.hgetall(presence_key()).items():
        name = name.decode() if isinstance(name, bytes) else name
        (live if float(until) > now else lapsed).append(name)
    return sorted(live), sorted(lapsed)


def queue_names(queue: str) -> list[str]:
    """The Redis lists that hold `queue`'s messages: one per priority step."""
    options = settings.CELERY_BROKER_TRANSPORT_OPTIONS
    return [queue] + [f"{queue}{options['sep']}{step}" for step in options["priority_steps"][1:]]


def queue_for(job: GenerationJob) -> str | None:
    """The queue of the live worker that holds (or will hold) the job's document, or None: the
    shared queue (no document, affinity off, fewer than two live workers, or that worker's
    queue already full). Workers are tried in the document's rendezvous order, and the first
    idle one (nothing held, nothing waiting in its queue) takes it when the first choice is
    busy: a document is kept together, but never while a worker stands idle."""
    if not enabled():
        return None
    document = document_digest(job.prompt_token_ids or ())
    if document is None:
        return None
    with current_app.connection_for_write() as connection:
        client = connection.default_channel.client
        live, _ = workers(client)
        if len(live) < 2:
            return None
        pipe = client.pipeline()
        for worker in live:
            for name in queue_names(worker_queue(worker)):
                pipe.llen(name)
        lengths = iter(pipe.execute())
        waiting = {worker: sum(next(lengths) for _ in queue_names("")) for worker in live}
        held = _held(live)
        order = sorted(live, key=lambda w: _weight(job.matter_id, document, w), reverse=True)
        idle = (worker for worker in order if not waiting[worker] and not held.get(worker))
        chosen = next((worker for worker in idle if _claim(client, worker, job)), order[0])
    if waiting[chosen] >= settings.PATHFINDER_WORKER_SEQUENCES:
        return None
    return worker_queue(chosen)


def claim_key(worker: str) -> str:
    """The Redis key that says an idle `worker` was just given a job it has not received yet."""
    return f"{settings.CELERY_TASK_DEFAULT_QUEUE}.claim.{worker}"


def _claim(client, worker: str, job: GenerationJob) -> bool:
    """Take the idle `worker` for this job, unless a job routed at the same moment took it:
    between the routing and the worker's receipt mark, neither its queue nor its marks show the
    job, so without the claim every question asked at once would go to the same idle worker."""
    return bool(client.set(claim_key(worker), str(job.pk), nx=True, px=CLAIM_MS))


def received(worker: str) -> None:
    """`worker` marked a job it received: its marks count it busy now, so its claim ends."""
    if enabled():
        with current_app.connection_for_write() as connection:
            connection.default_channel.client.delete(claim_key(worker))


def _held(live: list[str]) -> dict[str, int]:
    """How many unfinished jobs each worker holds now (decoding.delivery's marks)."""
    held = (
        GenerationJob.objects.filter(held_by__in=live, held_until__gt=timezone.now())
        .exclude(status__in=GenerationJob.FINISHED)
        .values_list("held_by")
        .annotate(count=Count("pk"))
    )
    return dict(held)


def _weight(matter_id, document: bytes, worker: str) -> bytes:
    """Rendezvous hashing: each worker's weight for this matter's document."""
    return hashlib.blake2b(
        b"|".join([str(matter_id).encode(), document, worker.encode()]), digest_size=8
    ).digest()

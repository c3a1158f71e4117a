"""Where a queued job's message is: waiting in the broker, held by a worker, or lost.

A job is sent with its id as the task id. A worker marks the jobs whose messages it holds
(received, reserved or decoding) with its name and a short hold, renewed while it holds them.
The recovery sweep sends again a queued job (or a running one whose lease lapsed) that no worker
holds and whose message the broker no longer has (its worker died holding it; the broker
restarted without persistence), within a minute, and never a job whose message still waits its
turn in the queue, however long.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import threading
from collections.abc import Iterable
from pathlib import Path

from celery import current_app
from django.conf import settings
from django.db import close_old_connections
from django.db.models import Q, QuerySet
from django.utils import timezone

from decoding import affinity, fair_share
from decoding.models import GenerationJob

logger = logging.getLogger(__name__)

# A worker's mark lasts this long; it renews its marks four times as often.
HOLD_S = 20
# A message just sent may not be in the broker's queue yet when the sweep looks.
SENT_GRACE_S = 10


RUN_GENERATION = "decoding.run_generation"  # the task decoding.tasks.run_generation
REPLAY_JOB = "decoding.replay_job"  # the task decoding.tasks.replay_job


def send(job: GenerationJob) -> None:
    """Hand the job to the queue, marked as sent and held by no worker yet: by task name (the
    task module imports this one), its id the task's, placed by its matter's share
    (fair_share.queue_priority), to the worker that holds its document where several serve
    (decoding.affinity; None: the shared queue)."""
    GenerationJob.objects.filter(pk=job.pk).update(
        enqueued_at=timezone.now(), received_at=None, held_by="", held_until=None
    )
    current_app.send_task(
        RUN_GENERATION,
        args=[str(job.pk)],
        task_id=str(job.pk),
        priority=fair_share.queue_priority(job),
        queue=affinity.queue_for(job),
    )


def send_replay(replay_id) -> None:
    """Hand a replay to the queue, by task name as send does."""
    current_app.send_task(REPLAY_JOB, args=[str(replay_id)])


def hold(job_ids: Iterable[str], worker: str) -> None:
    """Mark these jobs' messages as held by `worker` for HOLD_S more seconds (the first mark
    after a dispatch records when the message was received)."""
    ids = list(job_ids)
    if not ids:
        return
    now = timezone.now()
    jobs = GenerationJob.objects.filter(pk__in=ids).exclude(status__in=GenerationJob.FINISHED)
    jobs.filter(received_at=None).update(received_at=now)
    jobs.update(held_by=worker[:200], held_until=now + dt.timedelta(seconds=HOLD_S))


def lost(now: dt.datetime) -> list[GenerationJob]:
    """Jobs whose message is gone: queued and sent a while ago, or running with a lapsed lease
    (its worker died) and not sent since; held by no worker now, and not in the broker's queue.
    Where the broker cannot be looked into, those sent PATHFINDER_REQUEUE_AFTER_S ago instead.
    A queued job never sent (enqueue=False: `manage.py generate` decodes it in its own process)
    is not this sweep's."""

    def sent_before(moment: dt.datetime) -> QuerySet[GenerationJob]:
        queued = Q(status=GenerationJob.Status.QUEUED, enqueued_at__lt=moment)
        lapsed = Q(status=GenerationJob.Status.RUNNING, lease_expires_at__lt=now) & (
            Q(enqueued_at__lt=moment) | Q(enqueued_at=None)
        )
        return GenerationJob.objects.filter(queued | lapsed).exclude(held_until__gt=now)

    grace = now - dt.timedelta(seconds=SENT_GRACE_S)
    candidates = {str(pk) for pk in sent_before(grace).values_list("pk", flat=True)[:1000]}
    if not candidates:
        return []
    waiting = in_broker()
    if waiting is None:
        stale = now - dt.timedelta(seconds=settings.PATHFINDER_REQUEUE_AFTER_S)
        return list(sent_before(stale).filter(pk__in=candidates))
    # Read the marks again after the broker: a worker takes a message, then marks it.
    return list(sent_before(grace).filter(pk__in=candidates - waiting))


def in_broker() -> set[str] | None:
    """Task ids of the messages waiting in this deployment's queue; None where the transport
    (neither Redis nor kombu's filesystem) cannot be looked into, or did not answer."""
    url = settings.CELERY_BROKER_URL
    try:
        if url.startswith("redis"):
            return _in_redis()
        if url.startswith("filesystem"):
            return _in_folder(Path(settings.CELERY_BROKER_TRANSPORT_OPTIONS["data_folder_in"]))
    except Exception as exc:  # the broker is down: the sweep cannot send either
        logger.warning("could not look into the broker's queue", extra={"error": str(exc)})
    return None


def _in_redis() -> set[str]:
    """The shared queue's messages and those in the queues of live workers. A worker whose
    presence lapsed (decoding.affinity) takes nothing more from its queue: its queue is dropped
    here, so its jobs count as lost and the sweep sends them again."""
    with current_app.connection_for_write() as connection:
        client = connection.default_channel.client
        live, lapsed = affinity.workers(client)
        queues = [settings.CELERY_TASK_DEFAULT_QUEUE, *map(affinity.worker_queue, live)]
        pipe = client.pipeline()
        for name in (name for queue in queues for name in affinity.queue_names(queue)):
            pipe.lrange(name, 0, -1)
        waiting = {_task_id(raw) for items in pipe.execute() for raw in items}
        for worker in lapsed:
            client.delete(*affinity.queue_names(affinity.worker_queue(worker)))
            client.hdel(affinity.presence_key(), worker)
        return waiting


def take_waiting(worker: str) -> list[str]:
    """An idle worker's share of what waits for busy ones: while `worker` is live and its own
    queue is empty, up to PATHFINDER_WORKER_SEQUENCES messages move, the oldest of the highest
    priority first, from the queue of the live worker with the most waiting to `worker`'s own
    queue, which it consumes at once. A message waits in a worker's own queue only while that
    worker's slots are full, so it goes where a slot is free rather than behind the document's
    worker (its evaluation of the document is given up for that job). Each move is one atomic
    RPOPLPUSH, so a message is taken by its worker or moved, never both. Returns the moved
    messages' task ids. The caller holds nothing (decoding.delivery.Holder)."""
    if not affinity.enabled():
        return []
    moved: list[str] = []
    with current_app.connection_for_write() as connection:
        client = connection.default_channel.client
        live, _ = affinity.workers(client)
        if worker not in live:
            return []
        queues = {w: affinity.queue_names(affinity.worker_queue(w)) for w in live}
        pipe = client.pipeline()
        for w in live:
            for name in queues[w]:
                pipe.llen(name)
        lengths = iter(pipe.execute())
        waiting = {w: sum(next(lengths) for _ in queues[w]) for w in live}
        if waiting[worker]:
            return []
        budget = settings.PATHFINDER_WORKER_SEQUENCES
        for busy in sorted((w for w in live if waiting[w]), key=lambda w: -waiting[w]):
            # queue_names lists the priority steps highest first; kombu pops the right end.
            for source, target in zip(queues[busy], queues[worker], strict=True):
                while len(moved) < budget and (raw := client.rpoplpush(source, target)):
                    moved.append(_task_id(raw))
            if len(moved) >= budget:
                break
    if moved:
        logger.info("took waiting jobs from a busy worker", extra={"worker": worker, "jobs": moved})
    return moved


def _in_folder(folder: Path) -> set[str]:
    queue = settings.CELERY_TASK_DEFAULT_QUEUE
    ids = set()
    for path in folder.glob(f"*.{queue}.msg"):
        try:
            ids.add(_task_id(path.read_bytes()))
        except FileNotFoundError:
            continue  # a worker took it meanwhile
    return ids


def _task_id(raw: bytes) -> str:
    return json.loads(raw)["headers"]["id"]


class Holder:
    """A worker's renewal of its marks: every HOLD_S / 4 seconds, on a thread of the worker's
    main process, the jobs of every message it has received and not yet acknowledged; and, when
    it holds none, its turn to take what waits for busy workers (take_waiting)."""

    def __init__(self, worker: str):
        self.worker = worker
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pathfinder-holder", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.wait(HOLD_S / 4):
            self.renew()

    def renew(self) -> None:
        try:
            affinity.announce(self.worker)
            held = _held_job_ids()
            hold(held, self.worker)
            if not held:
                take_waiting(self.worker)
        except Exception as exc:  # the database is away: marks lapse, the sweep resends
            logger.warning("could not renew held jobs", extra={"error": str(exc)})
            close_old_connections()


def _held_job_ids() -> set[str]:
    from celery.worker import state

    requests = list(state.reserved_requests) + list(state.active_requests)
    return {request.id for request in requests if request.name == RUN_GENERATION}

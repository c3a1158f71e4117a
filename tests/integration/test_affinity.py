"""Where a job's message goes when several workers serve (decoding.affinity, issue 42 item 3),
against the real Redis: every question of a document to one live worker's queue, documents
spread over the workers, nothing routed with one worker, to a worker that stopped renewing, or
past a worker's full queue; a stopped worker's queue counted lost, so the sweep sends it again.
Each test uses a queue name of its own. (Two live workers taking their own queues:
tests/system/test_affinity_live.py.)"""

from __future__ import annotations

import datetime as dt
import random
import time
import uuid

import pytest
from celery import current_app
from django.utils import timezone

from decoding import affinity, delivery
from decoding.models import GenerationJob
from decoding.services import job_submit

WORKERS = ["w1@alpha", "w2@beta"]


@pytest.fixture
def redis_queue(settings):
    if not settings.CELERY_BROKER_URL.startswith("redis"):
        pytest.skip("document affinity routes over Redis only")
    settings.CELERY_TASK_DEFAULT_QUEUE = f"test-affinity-{uuid.uuid4().hex[:8]}"
    with current_app.connection_for_write() as connection:
        client = connection.default_channel.client
        yield client
        keys = client.keys(f"{settings.CELERY_TASK_DEFAULT_QUEUE}*")
        if keys:
            client.delete(*keys)


def job(owner, tokens: list[int]) -> GenerationJob:
    created, _ = job_submit(
        matter=owner.key.matter, api_key=owner.key, model="stub", prompt_token_ids=tokens,
        max_tokens=2, enqueue=False,
    )  # fmt: skip
    return created


def document(rng: random.Random, length: int) -> list[int]:
    return [rng.randrange(1, 30) for _ in range(length)]


def route(j: GenerationJob) -> str | None:
    """The job's queue, asked after every job routed before it was received (its claim ended),
    as when questions come one at a time."""
    queue = affinity.queue_for(j)
    for worker in WORKERS:
        affinity.received(worker)
    return queue


def test_every_question_of_a_document_goes_to_one_worker_and_documents_spread(owner, redis_queue):
    for worker in WORKERS:
        affinity.announce(worker)
    rng = random.Random(5)
    chosen = set()
    for _ in range(12):
        text = document(rng, rng.randrange(64, 600))
        queues = {route(job(owner, text + document(rng, n))) for n in (3, 9, 40)}
        assert len(queues) == 1 and None not in queues, queues
        chosen |= queues
    assert chosen == {affinity.worker_queue(worker) for worker in WORKERS}


def test_no_routing_without_a_document_or_a_second_worker_or_room(owner, redis_queue, settings):
    rng = random.Random(6)
    text = document(rng, 200)
    affinity.announce(WORKERS[0])
    assert affinity.queue_for(job(owner, text)) is None  # one worker: the shared queue
    affinity.announce(WORKERS[1])
    assert affinity.queue_for(job(owner, document(rng, 63))) is None  # shorter than a block
    queue = affinity.queue_for(job(owner, text))
    other = ({affinity.worker_queue(worker) for worker in WORKERS} - {queue}).pop()
    redis_queue.rpush(other, b"{}")  # busy too: nothing idle to go to instead
    redis_queue.rpush(queue, *[b"{}"] * settings.PATHFINDER_WORKER_SEQUENCES)
    assert affinity.queue_for(job(owner, text)) is None  # its queue is full: anyone takes it
    settings.PATHFINDER_DOCUMENT_AFFINITY = False
    redis_queue.delete(queue)
    assert affinity.queue_for(job(owner, text)) is None


def test_a_busy_workers_document_goes_to_an_idle_worker_never_past_a_busy_one(owner, redis_queue):
    for worker in WORKERS:
        affinity.announce(worker)
    text = document(random.Random(8), 150)
    first = affinity.queue_for(job(owner, text))
    running = job(owner, text)  # the document's worker holds one of its questions
    first_worker = first.removeprefix(affinity.worker_queue(""))
    delivery.hold([running.pk], first_worker)
    second = affinity.queue_for(job(owner, text + [5]))
    assert second not in (None, first)  # the other worker stood idle: it takes the question
    redis_queue.rpush(second, b"{}")  # now both are busy: the document's own worker again
    assert affinity.queue_for(job(owner, text + [6])) == first


def test_questions_routed_at_once_each_claim_an_idle_worker_until_received(owner, redis_queue):
    """Three questions of one document routed before any is received: neither queue nor marks
    show the first, so without the claim all three would go to the same idle worker."""
    for worker in WORKERS:
        affinity.announce(worker)
    text = document(random.Random(10), 120)
    queues = [affinity.queue_for(job(owner, text + [n])) for n in range(3)]
    assert len(set(queues)) == 2 and None not in queues, queues
    assert queues[2] == queues[0]  # no idle worker left: the document's own worker
    first = queues[0].removeprefix(affinity.worker_queue(""))
    affinity.received(first)  # its worker marked the job: that claim ended
    assert affinity.queue_for(job(owner, text + [7])) == queues[0]


def test_a_worker_that_stopped_renewing_gets_nothing_and_its_queue_is_sent_again(
    owner, redis_queue
):
    rng = random.Random(7)
    for worker in WORKERS:
        affinity.announce(worker)
    jobs = [job(owner, document(rng, 100 + n)) for n in range(8)]
    routed = {j.pk: route(j) for j in jobs}
    assert None not in routed.values()
    for j in jobs:  # into the workers' queues, as the feeder sends them
        delivery.send(j)
    a_minute_ago = timezone.now() - dt.timedelta(minutes=1)
    GenerationJob.objects.filter(pk__in=routed).update(enqueued_at=a_minute_ago)
    assert delivery.lost(timezone.now()) == []  # every message waits in a live worker's queue
    gone = affinity.worker_queue(WORKERS[0])
    redis_queue.hset(affinity.presence_key(), WORKERS[0], time.time() - 1)  # it stopped
    lost = {j.pk for j in delivery.lost(timezone.now())}
    assert lost and lost == {pk for pk, queue in routed.items() if queue == gone}
    assert not redis_queue.exists(gone)  # dropped: the sweep's sends are the only copies
    assert all(affinity.queue_for(j) != gone for j in jobs)


def waiting_ids(client, queue: str) -> list[str]:
    """Task ids in a worker's queue, the next to be taken first (kombu pops the right end)."""
    return [
        delivery._task_id(raw)
        for name in affinity.queue_names(queue)
        for raw in reversed(client.lrange(name, 0, -1))
    ]


def test_an_idle_worker_takes_the_oldest_messages_waiting_for_a_busy_one(
    owner, redis_queue, settings
):
    settings.PATHFINDER_WORKER_SEQUENCES = 3
    busy, idle = WORKERS
    for worker in WORKERS:
        affinity.announce(worker)
    jobs = [job(owner, document(random.Random(9), 100 + n)) for n in range(5)]
    busy_queue, idle_queue = affinity.worker_queue(busy), affinity.worker_queue(idle)
    for j in jobs:  # real messages, as the feeder sends them, all waiting for the busy worker
        current_app.send_task(delivery.RUN_GENERATION, args=[str(j.pk)], task_id=str(j.pk),
                              queue=busy_queue)  # fmt: skip
    sent = [str(j.pk) for j in jobs]
    assert waiting_ids(redis_queue, busy_queue) == sent

    assert delivery.take_waiting(idle) == sent[:3]  # its slots' worth, oldest first
    assert waiting_ids(redis_queue, idle_queue) == sent[:3]
    assert waiting_ids(redis_queue, busy_queue) == sent[3:]
    assert delivery.take_waiting(idle) == []  # its own queue is not empty: nothing more
    a_minute_ago = timezone.now() - dt.timedelta(minutes=1)
    GenerationJob.objects.filter(pk__in=sent).update(enqueued_at=a_minute_ago)
    assert delivery.lost(timezone.now()) == []  # moved, never dropped nor doubled

    assert delivery.take_waiting(busy) == []  # the busy worker's own queue holds the rest
    redis_queue.delete(*affinity.queue_names(idle_queue))
    redis_queue.hset(affinity.presence_key(), idle, time.time() - 1)
    assert delivery.take_waiting(idle) == []  # a worker that stopped renewing takes nothing
    affinity.announce(idle)
    settings.PATHFINDER_DOCUMENT_AFFINITY = False
    assert delivery.take_waiting(idle) == []
    assert waiting_ids(redis_queue, busy_queue) == sent[3:]


def test_a_worker_takes_waiting_messages_only_while_it_holds_nothing(monkeypatch):
    taken, held = [], set()
    monkeypatch.setattr(affinity, "announce", lambda worker: None)
    monkeypatch.setattr(delivery, "hold", lambda ids, worker: None)
    monkeypatch.setattr(delivery, "_held_job_ids", lambda: held)
    monkeypatch.setattr(delivery, "take_waiting", taken.append)
    holder = delivery.Holder("w1@alpha")
    holder.renew()
    assert taken == ["w1@alpha"]
    held.add("a job it decodes")
    holder.renew()
    assert taken == ["w1@alpha"]

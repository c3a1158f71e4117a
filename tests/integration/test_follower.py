"""One follower per web process (issue 45 item 3, decoding.web.follower): the callers waiting on
their jobs cost the process one subscription, or one round of reads, not one each, and each
caller is woken by its own job's progress, not another's.

Real PostgreSQL and Redis; the callers are threads of this process, as a gunicorn worker's
requests are. They share the test's connection (its transaction: the audit tables' triggers
refuse the truncation a transactional test ends with), as Django's live server shares one.
"""

from __future__ import annotations

import contextlib
import threading
import time

import pytest
import redis
from django.db import connection, connections
from django.db.backends import utils

from decoding import events
from decoding.models import GenerationJob
from decoding.services import job_submit
from decoding.web import follower as following
from decoding.web import relay

CALLERS = 12


@pytest.fixture(autouse=True)
def shared_connection(db):
    connection.inc_thread_sharing()
    yield
    connection.dec_thread_sharing()


def on_a_thread(target, *args) -> threading.Thread:
    """`target` started on a thread of its own that uses the test's connection."""
    shared = connections["default"]  # the wrapper itself, not the thread-local proxy

    def run():
        connections["default"] = shared
        target(*args)

    thread = threading.Thread(target=run)
    thread.start()
    return thread


@pytest.fixture
def jobs(owner) -> list:
    return [
        job_submit(
            matter=owner.key.matter,
            api_key=owner.key,
            model="stub",
            prompt_token_ids=[1, 2, 3],
            enqueue=False,
        )[0].id
        for _ in range(CALLERS)
    ]


@pytest.fixture
def job_row_reads(monkeypatch) -> list[str]:
    """Every SQL statement, from any thread of this process, that reads the job table."""
    seen: list[str] = []
    original = utils.CursorWrapper.execute

    def counted(cursor, sql, params=None):
        if sql.lstrip().upper().startswith("SELECT") and "decoding_generationjob" in sql:
            seen.append(sql)
        return original(cursor, sql, params)

    monkeypatch.setattr(utils.CursorWrapper, "execute", counted)
    return seen


@pytest.fixture
def polling(settings):
    settings.PATHFINDER_EVENTS_URL = ""


@pytest.fixture
def slow_wake(monkeypatch):
    """A caller's own look every 2 s, so that any earlier look was a wake-up."""
    monkeypatch.setattr(following, "WAKE_S", 2.0)


def waiting(job_ids, seconds: float) -> list[threading.Thread]:
    """A caller waiting on each job as a /v1 call does (relay.wait), each on its own thread."""

    def wait(job_id):
        with contextlib.suppress(relay.JobTimeout):
            relay.wait(job_id, timeout=seconds)

    return [on_a_thread(wait, job_id) for job_id in job_ids]


class Looks:
    """A caller's looks (the follower's yields), timed, on a thread of its own."""

    def __init__(self, job_id, seconds: float) -> None:
        self.times: list[float] = []
        self._thread = on_a_thread(self._run, job_id, seconds)

    def _run(self, job_id, seconds) -> None:
        for _ in following.FOLLOWER.wakeups(job_id, timeout=seconds):
            self.times.append(time.monotonic())

    def between(self, start: float, end: float) -> int:
        return sum(start <= t < end for t in self.times)

    def join(self) -> None:
        self._thread.join()


def test_without_notices_twelve_callers_cost_one_round_of_reads_not_twelve(
    polling, jobs, job_row_reads
):
    seconds = 2.0
    for caller in waiting(jobs, seconds):
        caller.join()
    one_each = CALLERS * seconds / following.POLL_S  # each caller reading its row every POLL_S
    assert len(job_row_reads) < one_each / 4, len(job_row_reads)
    # What they read: a round now and then, a caller's row at its start and its own looks.
    assert len(job_row_reads) >= CALLERS * seconds / following.WAKE_S


def test_without_notices_a_caller_wakes_when_its_job_moves_and_no_other_does(
    polling, slow_wake, jobs
):
    mover, bystander = Looks(jobs[0], 3.0), Looks(jobs[1], 3.0)
    time.sleep(0.4)  # both made their first look, and the first round has seen both jobs
    moved_at = time.monotonic()
    GenerationJob.objects.filter(pk=jobs[0]).update(status=GenerationJob.Status.RUNNING)
    time.sleep(0.5)
    assert mover.between(moved_at, moved_at + 0.5) == 1
    assert bystander.between(moved_at, moved_at + 0.5) == 0
    mover.join(), bystander.join()


def test_with_notices_the_process_holds_one_subscription_and_a_notice_wakes_its_job_only(
    settings, slow_wake, jobs
):
    assert settings.PATHFINDER_EVENTS_URL.startswith("redis://")
    waits = waiting(jobs, 1.5)
    time.sleep(0.5)
    client = redis.Redis.from_url(settings.PATHFINDER_EVENTS_URL)
    channels = client.pubsub_numsub(*[events._channel(job_id) for job_id in jobs])
    assert [count for _, count in channels] == [0] * CALLERS  # no caller subscribed on its own
    listeners = [t for t in threading.enumerate() if t.name == "job-notices" and t.is_alive()]
    assert len(listeners) == 1
    assert following.FOLLOWER._listener.subscribed.is_set()
    for wait in waits:
        wait.join()
    callers = [Looks(job_id, 3.0) for job_id in jobs]
    time.sleep(0.5)
    sent_at = time.monotonic()
    events.publish(jobs[3])
    time.sleep(0.5)
    woken = [caller.between(sent_at, sent_at + 0.5) for caller in callers]
    assert woken == [1 if i == 3 else 0 for i in range(CALLERS)]
    for caller in callers:
        caller.join()


def test_while_the_subscription_is_down_callers_run_the_rounds(settings, slow_wake, jobs):
    settings.PATHFINDER_EVENTS_URL = "redis://127.0.0.1:1/0"  # nothing listens there
    caller = Looks(jobs[0], 2.0)
    time.sleep(0.4)
    moved_at = time.monotonic()
    GenerationJob.objects.filter(pk=jobs[0]).update(status=GenerationJob.Status.RUNNING)
    time.sleep(0.4)
    assert caller.between(moved_at, moved_at + 0.4) == 1
    caller.join()


def test_a_caller_looks_once_more_at_its_deadline(settings, slow_wake, jobs):
    """A job that ends just before the caller's deadline, its notice lost, is still answered:
    the caller reads its job a last time when the deadline comes, as it always did."""
    assert settings.PATHFINDER_EVENTS_URL.startswith("redis://")

    def end_quietly():  # a worker whose notice never arrives
        time.sleep(0.6)
        GenerationJob.objects.filter(pk=jobs[0]).update(status=GenerationJob.Status.SUCCEEDED)

    ender = on_a_thread(end_quietly)
    job = relay.wait(jobs[0], timeout=1.0)
    ender.join()
    assert job.status == GenerationJob.Status.SUCCEEDED

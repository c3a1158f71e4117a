"""At-least-once delivery made safe: a job whose worker died runs again as a new attempt with a
new trail linked to the abandoned one; a live attempt is never doubled; attempts are bounded;
the recovery sweep re-queues lost messages; periodic work runs under a lock."""

import datetime as dt
import secrets
from contextlib import ExitStack

import pytest
import redis
from django.db.models import F
from django.utils import timezone

from audit.locks import lock_acquire, run_coalesced, run_exclusively
from audit.models import LedgerEntry, Trail
from audit.selectors import trail_clear_decisions
from audit.store import trail_append, trail_open, trail_seal
from audit.verification import verify_trails
from decoding import delivery, services
from decoding.claims import job_question, job_request_payload
from decoding.delivery import RUN_GENERATION
from decoding.models import GenerationJob, Replay
from decoding.tasks import recovery_sweep
from decoding.worker import execution, leases, runtime
from decoding.worker.execution import LeaseHeld, job_run
from pathfinder_site import celery_app
from tests.integration.records import plain_step


@pytest.fixture
def submitted(owner):
    def submit(**body):
        response = owner.api.post(
            "/api/v1/generations",
            {"prompt_token_ids": [1, 2], "max_tokens": 20, **body},
            format="json",
        )
        return GenerationJob.objects.get(pk=response.json()["id"])

    return submit


def died_mid_decode(job: GenerationJob, *, records: int = 2, lease_left_s: float = -1) -> Trail:
    """The state a worker killed mid-decode leaves: running, an open trail with some records,
    a lease that lapses lease_left_s from now (after an earlier attempt, as its claim does)."""
    if job.trail_id is not None:
        trail_seal(trail_id=job.trail_id, outcome="abandoned")
    trail = trail_open(job_id=job.id, attempt=job.attempts + 1, previous_id=job.trail_id)
    models, _ = runtime.models_for(job.model_spec)
    request = job_request_payload(job, trail, models)
    trail_append(trail_id=trail.id, payload=request)
    prompt_tokens = len(job_question(job).token_ids)
    for step in range(records):
        step_payload = plain_step(request, step, token=5, prompt_tokens=prompt_tokens)
        trail_append(trail_id=trail.id, payload=step_payload)
    GenerationJob.objects.filter(pk=job.pk).update(
        status="running",
        attempts=job.attempts + 1,
        trail_id=trail.id,
        started_at=timezone.now(),
        lease_expires_at=timezone.now() + dt.timedelta(seconds=lease_left_s),
    )
    return trail


def emitted(trail_id) -> list[int]:
    return [t for p in trail_clear_decisions(trail_id=trail_id) for t in p["emitted"]]


def test_a_job_whose_worker_died_runs_again_as_a_new_linked_attempt(submitted):
    job = submitted()
    dead = died_mid_decode(job)
    job_run(job_id=job.id)

    job.refresh_from_db()
    assert (job.status, job.attempts) == ("succeeded", 2)
    old, new = Trail.objects.get(pk=dead.id), Trail.objects.get(pk=job.trail_id)
    assert (old.status, old.outcome, old.record_count) == ("sealed", "abandoned", 3)  # request + 2
    assert (new.attempt, new.previous_id, new.outcome) == (2, dead.id, "succeeded")
    # One output, from the new attempt only.
    assert job.output_token_ids == emitted(new.id)
    assert verify_trails([old.id, new.id], scope="test").ok


def test_a_delivery_while_the_attempt_is_alive_waits_and_does_not_run_it(submitted):
    job = submitted()
    died_mid_decode(job, lease_left_s=30)
    with pytest.raises(LeaseHeld) as held:
        job_run(job_id=job.id)
    assert 28 < held.value.retry_in <= 30
    job.refresh_from_db()
    assert (job.status, job.attempts, Trail.objects.filter(job_id=job.id).count()) == (
        "running",
        1,
        1,
    )


def test_after_the_last_attempt_the_job_fails_with_the_reason(submitted, settings):
    settings.PATHFINDER_MAX_ATTEMPTS = 2
    job = submitted()
    died_mid_decode(job)
    job.refresh_from_db()
    died_mid_decode(job)  # attempt 2 died too
    job_run(job_id=job.id)
    job.refresh_from_db()
    assert job.status == "failed"
    assert "worker was lost in each of 2 attempts" in job.error
    assert job.output_token_ids == []
    outcomes = sorted(Trail.objects.filter(job_id=job.id).values_list("outcome", flat=True))
    assert outcomes == ["abandoned", "abandoned"]


def test_a_cancelled_job_whose_worker_died_is_not_retried(submitted):
    job = submitted()
    died_mid_decode(job)
    GenerationJob.objects.filter(pk=job.pk).update(cancel_requested_at=timezone.now())
    job_run(job_id=job.id)
    job.refresh_from_db()
    assert (job.status, job.attempts) == ("cancelled", 1)


def test_an_attempt_that_lost_its_job_stops_and_writes_no_output(submitted, monkeypatch):
    job = submitted(max_tokens=400)
    taken_over = []
    original = execution._step_boundary

    def boundary(watch):
        check = original(watch)

        def cancelled():
            if not taken_over:  # as if this worker stalled past its lease and another took over
                GenerationJob.objects.filter(pk=watch.job_id).update(attempts=watch.attempt + 1)
                taken_over.append(True)
            return check()

        return cancelled

    monkeypatch.setattr(leases, "STEP_CHECK_S", 0)
    monkeypatch.setattr(execution, "_step_boundary", boundary)
    job_run(job_id=job.id)
    job.refresh_from_db()
    assert job.status == "running" and job.output_token_ids == []  # the new owner's to finish


def test_the_sweep_requeues_lapsed_and_long_queued_jobs(
    submitted, settings, sent_jobs, private_queue
):
    settings.PATHFINDER_REQUEUE_AFTER_S = 60
    queued_long_ago = submitted()
    GenerationJob.objects.filter(pk=queued_long_ago.pk).update(
        enqueued_at=timezone.now() - dt.timedelta(minutes=5)
    )
    fresh = submitted()
    GenerationJob.objects.filter(pk=fresh.pk).update(enqueued_at=timezone.now())
    lapsed = submitted()
    died_mid_decode(lapsed)
    sent = sent_jobs
    assert services.jobs_recover() == 2
    assert sorted(sent) == sorted([str(queued_long_ago.pk), str(lapsed.pk)])
    assert services.jobs_recover() == 0  # re-queued just now: not again until the next period


@pytest.fixture
def private_queue(settings):
    """A queue of this test's own on the test Redis, which the sweep looks into (the jobs'
    messages are published to it as _send would, the sweep's own sends are counted by
    sent_jobs); deleted afterwards."""
    if not settings.CELERY_BROKER_URL.startswith("redis"):
        pytest.fail("this test looks into a real Redis broker: set CELERY_BROKER_URL (make test)")
    name = f"pathfinder-test-{secrets.token_hex(4)}"
    settings.CELERY_TASK_DEFAULT_QUEUE = name
    lists = [name] + [f"{name}:{step}" for step in range(1, 10)]

    def publish(job: GenerationJob) -> None:
        type(celery_app).send_task(  # the class's: sent_jobs replaces the instance's
            celery_app, RUN_GENERATION, args=[str(job.pk)], task_id=str(job.pk),
            queue=name, priority=3,
        )  # fmt: skip

    publish.forget = lambda: redis.Redis.from_url(settings.CELERY_BROKER_URL).delete(*lists)
    yield publish
    publish.forget()


def queued_minutes_ago(job: GenerationJob, minutes: float) -> None:
    GenerationJob.objects.filter(pk=job.pk).update(
        enqueued_at=timezone.now() - dt.timedelta(minutes=minutes)
    )


def test_a_job_waiting_its_turn_in_the_broker_is_never_sent_twice(
    submitted, settings, sent_jobs, private_queue
):
    settings.PATHFINDER_REQUEUE_AFTER_S = 60
    job = submitted()
    sent_jobs.clear()
    private_queue(job)
    queued_minutes_ago(job, 30)  # a deep queue: long past PATHFINDER_REQUEUE_AFTER_S
    assert services.jobs_recover() == 0 and sent_jobs == []
    private_queue.forget()  # the broker restarted without persistence: the message is gone
    assert services.jobs_recover() == 1 and sent_jobs == [str(job.pk)]


def test_a_job_held_by_a_worker_is_sent_again_once_its_hold_lapses(
    submitted, settings, sent_jobs, private_queue
):
    job = submitted()
    sent_jobs.clear()
    queued_minutes_ago(job, 1)
    delivery.hold([str(job.pk)], "w1@host")  # received: out of the queue, in the worker
    job.refresh_from_db()
    received = job.received_at
    assert job.held_by == "w1@host" and job.held_until > timezone.now()
    delivery.hold([str(job.pk)], "w1@host")  # renewed: received once
    job.refresh_from_db()
    assert job.received_at == received
    assert services.jobs_recover() == 0  # its worker holds it
    GenerationJob.objects.filter(pk=job.pk).update(held_until=timezone.now())  # the worker died
    assert services.jobs_recover() == 1 and sent_jobs == [str(job.pk)]
    job.refresh_from_db()
    assert (job.received_at, job.held_by, job.held_until) == (None, "", None)  # sent anew
    assert services.jobs_recover() == 0  # just sent: its message may not be visible yet


def test_a_job_never_sent_is_not_the_sweeps(submitted, sent_jobs, private_queue):
    """enqueue=False (`manage.py generate` decodes its job in its own process): queued with no
    message, and never sent by the sweep however long it waits."""
    job = submitted()
    GenerationJob.objects.filter(pk=job.pk).update(
        enqueued_at=None, created_at=timezone.now() - dt.timedelta(hours=1)
    )
    sent_jobs.clear()
    assert services.jobs_recover() == 0 and sent_jobs == []


def test_periodic_work_runs_once_while_its_lock_is_held(db):
    assert lock_acquire("audit.verify_all", 60)
    assert run_exclusively("audit.verify_all", 60, lambda: "ran") is None
    assert run_exclusively("audit.create_checkpoint", 60, lambda: "ran") == "ran"


def test_a_wake_up_that_arrives_mid_run_is_run_after_it_not_dropped(db):
    """The batches' advance is woken by events (a create, a cancel); one that arrives while an
    advance runs finds the lease held, and must not be lost until the next beat tick."""
    runs = []

    def work():
        runs.append(len(runs) + 1)
        if len(runs) == 1:  # a cancel's kick lands while the first run holds the lease
            assert run_coalesced("decoding.advance_batches", 60, work) is None
        return len(runs)

    assert run_coalesced("decoding.advance_batches", 60, work) == 2
    assert runs == [1, 2]
    assert run_coalesced("decoding.advance_batches", 60, work) == 3  # no ask left behind


def test_an_operator_retries_a_failed_job_as_a_new_attempt(run_job, sent_jobs):
    job = run_job(max_tokens=5)
    GenerationJob.objects.filter(pk=job.pk).update(status="failed", error="disk full")
    sent = sent_jobs
    job.refresh_from_db()
    assert services.job_retry(job=job)
    assert sent == [str(job.pk)]
    job_run(job_id=job.pk)
    job.refresh_from_db()
    assert (job.status, job.attempts) == ("succeeded", 2)
    assert Trail.objects.get(pk=job.trail_id).previous_id is not None


def test_the_sweep_seals_trails_their_attempts_left_open(submitted, settings, sent_jobs):
    settings.PATHFINDER_JOB_LEASE_S = 60
    old = timezone.now() - dt.timedelta(seconds=61)

    def left_open(job, attempt, status, *, age=old):
        trail = trail_open(job_id=job.id, attempt=attempt)
        Trail.objects.filter(pk=trail.pk).update(created_at=age)
        GenerationJob.objects.filter(pk=job.pk).update(
            status=status, attempts=max(attempt, job.attempts), trail_id=trail.id
        )
        job.refresh_from_db()
        return trail

    failed = left_open(submitted(), 1, "failed")  # its seal failed with the store
    cancelled = left_open(submitted(), 1, "cancelled")
    retried = submitted()
    superseded = left_open(retried, 1, "running")
    current = left_open(retried, 2, "running")  # the live attempt: its lease decides
    fresh = left_open(submitted(), 1, "failed", age=timezone.now())  # maybe still sealing

    assert recovery_sweep()["trails_sealed"] == 3
    outcomes = {t.pk: (t.status, t.outcome) for t in Trail.objects.all()}
    assert outcomes[failed.pk] == ("sealed", "failed")
    assert outcomes[cancelled.pk] == ("sealed", "cancelled")
    assert outcomes[superseded.pk] == ("sealed", "abandoned")
    assert outcomes[current.pk][0] == outcomes[fresh.pk][0] == "open"
    assert LedgerEntry.objects.filter(trail_id__in=[failed.pk, superseded.pk]).count() == 2
    assert services.trails_seal_orphaned() == 0  # once


def test_the_sweep_fails_a_replay_whose_worker_died(run_job):
    job = run_job(max_tokens=5)
    lapsed = Replay.objects.create(
        job=job, trail_id=job.trail_id, status="running",
        lease_expires_at=timezone.now() - dt.timedelta(seconds=1),
    )  # fmt: skip
    live = Replay.objects.create(
        job=job, trail_id=job.trail_id, status="running",
        lease_expires_at=timezone.now() + dt.timedelta(seconds=60),
    )  # fmt: skip
    assert recovery_sweep()["replays_failed"] == 1
    lapsed.refresh_from_db()
    live.refresh_from_db()
    assert (lapsed.status, live.status) == ("failed", "running")
    assert "worker running the replay was lost" in lapsed.error


def test_a_job_decoding_past_the_time_limit_fails_at_its_next_step(
    submitted, settings, monkeypatch
):
    """A worker decoding several jobs runs them in threads, which Celery's time limit cannot
    stop: the job's own step check ends it, its trail sealed failed, nothing released."""
    settings.CELERY_TASK_TIME_LIMIT = 1
    job = submitted(max_tokens=400)
    clock = [1000.0]
    monkeypatch.setattr(
        execution.time, "monotonic", lambda: clock.append(clock[-1] + 0.3) or clock[-1]
    )
    job_run(job_id=job.id)
    job.refresh_from_db()
    assert (job.status, job.failure) == ("failed", "generation_failed")
    assert job.output_token_ids == [] and job.output_text == ""
    assert Trail.objects.get(pk=job.trail_id).outcome == "failed"


def test_one_round_renews_every_stepping_attempt_and_reads_each_ones_cancel(
    submitted, monkeypatch, django_assert_num_queries
):
    """A worker decoding several jobs renews their leases and reads their cancels together:
    one UPDATE and one SELECT a round, whichever job's step runs it. An attempt that did not
    step since the last round keeps its lease as it was (a stuck job's lease still lapses);
    a cancel reaches only its own job; a taken-over job's attempt stops."""
    monkeypatch.setattr(leases, "STEP_CHECK_S", 0)
    # Rounds of its own: a decoding thread another test left running can hold the process's
    # round lock, and a step then (rightly) skips its round (seen once in CI: 0 queries).
    monkeypatch.setattr(leases, "LEASES", leases.Leases())
    stepping, stuck, cancelled, taken = (submitted() for _ in range(4))
    for job in (stepping, stuck, cancelled, taken):
        died_mid_decode(job, lease_left_s=5)
    GenerationJob.objects.filter(pk=cancelled.pk).update(cancel_requested_at=timezone.now())
    GenerationJob.objects.filter(pk=taken.pk).update(attempts=F("attempts") + 1)
    lapsing = GenerationJob.objects.get(pk=stuck.pk).lease_expires_at
    with ExitStack() as held:
        watches = [
            held.enter_context(leases.LEASES.watching(j.pk, 1))
            for j in (stepping, stuck, cancelled, taken)
        ]
        watches[1].stepped = False
        with django_assert_num_queries(2):
            assert watches[0].step() is False
        assert watches[2].step() is True
        with pytest.raises(leases.LostOwnership):
            watches[3].step()
    leased = dict(GenerationJob.objects.values_list("pk", "lease_expires_at"))
    assert leased[stepping.pk] > lapsing + dt.timedelta(seconds=30)
    assert leased[stuck.pk] == lapsing

"""Fair share, in one process: the caps per key and per matter (429 naming the cap, with
Retry-After, nothing stored), the web process's wait slots, the queue priority of a matter's
next job, a wait that ends when its caller leaves or the service stops, and a stream that never
mixes two attempts' trails. (A flood against real gunicorn and Celery: tests/system.)"""

from __future__ import annotations

import socket
from types import SimpleNamespace

import pytest

from audit.store import trail_append, trail_open
from decoding.fair_share import OverCapacity, admit
from decoding.models import GenerationJob
from decoding.services import job_submit
from decoding.web import relay, waiting

STUB = {"model": "stub", "prompt": [1, 2, 3], "max_tokens": 4}


def submit(owner, *, caller_waits=False, matter=None):
    job, _ = job_submit(
        matter=matter or owner.key.matter,
        api_key=owner.key,
        model="stub",
        prompt_token_ids=[1, 2, 3],
        caller_waits=caller_waits,
        max_tokens=4,
    )
    return job


def test_a_matter_over_its_queued_cap_gets_a_429_naming_it_and_nothing_is_stored(owner, settings):
    settings.PATHFINDER_MATTER_MAX_QUEUED = 2
    for _ in range(2):  # queued: in a test transaction nothing is handed to a worker
        response = owner.api.post("/api/v1/generations", {"prompt_token_ids": [1]}, format="json")
        assert response.status_code == 202
    refused = owner.api.post("/api/v1/generations", {"prompt_token_ids": [1]}, format="json")
    assert refused.status_code == 429
    error = refused.json()["error"]
    assert error["code"] == "over_capacity"
    assert error["message"].startswith("PATHFINDER_MATTER_MAX_QUEUED:")
    assert int(refused["Retry-After"]) >= 1
    assert GenerationJob.objects.count() == 2


def test_a_key_over_its_waiting_cap_gets_a_429_on_v1_and_other_keys_do_not(
    owner, outsider, settings
):
    settings.PATHFINDER_KEY_MAX_WAITING = 2
    for _ in range(2):
        submit(owner, caller_waits=True)
    refused = owner.api.post("/v1/completions", STUB, format="json")
    assert refused.status_code == 429
    error = refused.json()["error"]
    assert error["type"] == "rate_limit_error" and error["code"] == "over_capacity"
    assert "PATHFINDER_KEY_MAX_WAITING" in error["message"]
    assert int(refused["Retry-After"]) >= 1
    assert GenerationJob.objects.count() == 2
    # Jobs nobody waits on (the native API) do not count, nor do another key's waits.
    admit(matter=owner.key.matter, api_key=owner.key, caller_waits=False)
    admit(matter=outsider.key.matter, api_key=outsider.key, caller_waits=True)


def test_a_finished_wait_frees_its_place(owner, settings):
    settings.PATHFINDER_KEY_MAX_WAITING = 1
    job = submit(owner, caller_waits=True)
    with pytest.raises(OverCapacity):
        admit(matter=owner.key.matter, api_key=owner.key, caller_waits=True)
    GenerationJob.objects.filter(pk=job.pk).update(status=GenerationJob.Status.CANCELLED)
    admit(matter=owner.key.matter, api_key=owner.key, caller_waits=True)


def test_a_web_process_holds_at_most_its_wait_slots(settings):
    settings.PATHFINDER_WEB_MAX_WAITING = 2
    first, second = waiting.WaitSlot("a"), waiting.WaitSlot("b")
    with pytest.raises(OverCapacity) as refused:
        waiting.WaitSlot("c")
    assert refused.value.setting == "PATHFINDER_WEB_MAX_WAITING"
    first.release()
    first.release()  # twice is once: a slot is never given back twice
    third = waiting.WaitSlot("c")
    with pytest.raises(OverCapacity):
        waiting.WaitSlot("a")
    second.release()
    third.release()


def take(matter, count: int) -> list:
    """As many of `count` wait slots as the matter is given, in order, until the first refusal."""
    held = []
    for _ in range(count):
        try:
            held.append(waiting.WaitSlot(matter))
        except OverCapacity:
            break
    return held


def test_one_matter_cannot_hold_every_wait_slot_and_another_is_admitted_at_once(settings):
    settings.PATHFINDER_WEB_MAX_WAITING = 12
    flood = take("flooding", 40)
    assert len(flood) == 9  # three quarters: a quarter stays for a matter holding none
    other = take("other", 40)
    assert len(other) == 3  # every free slot, below its share (half of nine)
    assert take("third", 1) == []  # full, for now
    # As the flood's waits end, its share is half of the nine, the other's grows to it.
    for slot in flood[:5]:
        slot.release()
    assert take("flooding", 1) == []  # it holds four, its share of two matters
    other += take("other", 40)
    assert len(other) == 4
    third = take("third", 1)
    assert len(third) == 1  # a matter holding none finds a free slot
    for slot in flood + other + third:
        slot.release()
    again = take("flooding", 40)
    assert len(again) == 9  # nothing is left held
    for slot in again:
        slot.release()


def test_a_lone_slot_goes_to_whichever_matter_asks_first(settings):
    settings.PATHFINDER_WEB_MAX_WAITING = 1
    (only,) = take("a", 2)
    assert take("b", 1) == []
    only.release()
    (then,) = take("b", 1)
    then.release()


def test_a_matter_with_fewer_jobs_in_flight_is_sent_at_a_higher_priority(
    owner, outsider, sent_jobs, django_capture_on_commit_callbacks
):
    for _ in range(12):  # each handed to the queue as it is committed
        with django_capture_on_commit_callbacks(execute=True):
            submit(owner)
    with django_capture_on_commit_callbacks(execute=True):
        other = submit(outsider)
    # The last step, 9, only a batch line reaches: one place behind a matter with 8 calls.
    assert sent_jobs.priorities[:12] == [0, 1, 2, 3, 4, 5, 6, 7, 8, 8, 8, 8]
    assert (sent_jobs[-1], sent_jobs.priorities[-1]) == (str(other.id), 0)  # Redis: 0 goes first


def test_a_wait_ends_when_its_caller_closes_the_connection():
    ours, theirs = socket.socketpair()
    check = waiting.watch(SimpleNamespace(META={"gunicorn.socket": ours}))
    check()  # open and quiet: still waiting
    theirs.sendall(b"x")  # a pipelined byte is not a goodbye
    check()
    theirs.close()
    with pytest.raises(waiting.CallerGone):
        check()
    ours.close()


def test_every_wait_ends_once_the_service_is_stopping(owner):
    job = submit(owner, caller_waits=True)
    waiting.STOPPING.set()
    try:
        with pytest.raises(waiting.ServiceStopping):
            relay.wait(job.id, timeout=5, check=waiting.watch(SimpleNamespace(META={})))
    finally:
        waiting.STOPPING.clear()


def _decision(emitted):
    """A step that accepted every token but the last, which the target added: enough of a
    decision for the store to seal and the relay to read back (no rule is checked here)."""
    drafted = [{"token": t, "accepted": True} for t in emitted[:-1]]
    return {"v": 3, "kind": "decision", "step": 0, "drafted": drafted,
            "accepted_count": len(drafted), "correction": {"token": emitted[-1]},
            "emitted": emitted}  # fmt: skip


def _new_attempt(job):
    trail = trail_open(job_id=job.id, attempt=job.attempts + 1, previous_id=job.trail_id)
    GenerationJob.objects.filter(pk=job.pk).update(trail_id=trail.id, attempts=job.attempts + 1)
    return trail


def test_a_stream_restarts_on_a_new_attempt_when_nothing_was_relayed(owner):
    job = submit(owner, caller_waits=True)
    job.refresh_from_db()
    _new_attempt(job)  # the first attempt's worker died before its first step
    job.refresh_from_db()
    looks = relay.follow(job.id, timeout=5)
    assert next(looks).token_ids == []
    second = _new_attempt(job)
    trail_append(trail_id=second.id, payload=_decision([5, 6]))
    assert next(looks).token_ids == [5, 6]  # from the new attempt's trail, from its start


def test_a_stream_never_mixes_two_attempts_trails(owner):
    job = submit(owner, caller_waits=True)
    first = _new_attempt(job)
    trail_append(trail_id=first.id, payload=_decision([7]))
    job.refresh_from_db()
    looks = relay.follow(job.id, timeout=5)
    assert next(looks).token_ids == [7]
    second = _new_attempt(job)
    trail_append(trail_id=second.id, payload=_decision([8, 9]))
    with pytest.raises(relay.AttemptChanged):
        next(looks)


# --- Bounded inputs ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "body", "field", "says"),
    [
        ("/api/v1/generations", {"prompt_token_ids": [1] * 5000}, "prompt_token_ids", "At most"),
        ("/v1/completions", {"model": "stub", "prompt": [1] * 5000}, "prompt", "At most"),
        ("/api/v1/generations", {"prompt_token_ids": [1], "stop": "x" * 100_000}, "stop", "256"),
        ("/v1/completions", {"model": "stub", "prompt": [1], "stop": ["y" * 257]}, "stop", "256"),
    ],
)
def test_oversized_inputs_are_a_400_naming_the_field_and_store_nothing(
    owner, path, body, field, says
):
    response = owner.api.post(path, body, format="json")
    assert response.status_code == 400, response.json()
    error = response.json()["error"]
    assert error.get("field", error.get("param")) == field
    assert says in error["message"]
    assert not GenerationJob.objects.exists()


@pytest.fixture
def three_slots():
    """This process as a worker decoding three jobs at once (a threads pool of three)."""
    from decoding.worker import runtime

    runtime.set_worker_sequences(3)
    yield runtime
    runtime.set_worker_sequences(1)


def test_a_backlog_may_not_take_a_workers_last_slot_while_another_matter_waits(
    owner, outsider, three_slots
):
    from decoding.fair_share import others_waiting
    from decoding.worker.execution import TryLater, job_run

    runtime = three_slots
    backlog = [submit(owner) for _ in range(3)]
    matter = owner.key.matter_id
    with runtime.matter_slot(matter, others_waiting), runtime.matter_slot(matter, others_waiting):
        # Nobody else waits: the backlog may fill the worker.
        with runtime.matter_slot(matter, others_waiting):
            pass
        waiting = submit(outsider)
        with pytest.raises(TryLater):
            job_run(job_id=backlog[2].id)
        deferred = GenerationJob.objects.get(pk=backlog[2].pk)
        assert deferred.status == GenerationJob.Status.QUEUED and deferred.attempts == 0
        assert deferred.trail_id is None
        # The waiting matter's job takes the last slot and runs.
        job_run(job_id=waiting.id)
        assert GenerationJob.objects.get(pk=waiting.pk).status == "succeeded"
    # With slots free again the deferred job runs.
    job_run(job_id=backlog[2].id)
    assert GenerationJob.objects.get(pk=backlog[2].pk).status == "succeeded"

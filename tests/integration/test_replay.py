"""Invariant 4: re-running a recorded job reproduces every decision field but the timings."""

import pytest

from decoding.models import Replay
from decoding.services import replay_request
from decoding.worker import runtime
from decoding.worker.replay import differing_fields, replay_run


def replayed(job) -> Replay:
    replay = replay_request(job=job)
    replay_run(replay_id=replay.id)
    replay.refresh_from_db()
    return replay


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_a_replay_of_a_recorded_job_is_identical_step_by_step(run_job, temperature):
    job = run_job(max_tokens=40, temperature=temperature, top_k=8)
    replay = replayed(job)
    assert replay.status == "done", replay.error
    assert replay.identical is True
    assert replay.first_divergence is None
    assert replay.steps_compared == job.steps
    assert all(step["identical"] for step in replay.steps)


def test_a_replay_with_another_draft_model_names_the_first_divergence(run_job, settings):
    job = run_job(max_tokens=20, temperature=1.0)
    settings.PATHFINDER_STUB_DRAFT_NOISE = 2.0
    runtime._loaded.clear()  # a worker that loaded other weights since
    try:
        replay = replayed(job)
    finally:
        runtime._loaded.clear()
    assert replay.status == "done", replay.error
    assert replay.identical is False
    assert replay.first_divergence["step"] == 0
    assert replay.first_divergence["field"] == "draft"  # the draft model's identity changed
    assert "noise=2.0" in replay.first_divergence["replayed"]


def test_a_replay_on_the_real_default_model_is_identical(owner):
    import json

    from decoding.models import GenerationJob
    from decoding.worker.execution import job_run

    response = owner.api.post(
        "/api/v1/generations",
        data=json.dumps(
            {
                "model": "smollm2-135m-instruct",
                "prompt": "Quote: 'the quick brown fox'. Again: 'the quick brown fox",
                "max_tokens": 24,
                "temperature": 0.7,
                "seed": 11,
            }
        ),
        content_type="application/json",
    )
    job_run(job_id=response.json()["id"])
    job = GenerationJob.objects.get(pk=response.json()["id"])
    replay = replayed(job)
    assert replay.status == "done", replay.error
    assert replay.identical is True, replay.first_divergence


def test_manage_py_replay_prints_identical_for_each_job_and_exits_0(run_job):
    from io import StringIO

    from django.core.management import call_command

    greedy, sampled = run_job(max_tokens=24, temperature=0.0), run_job(max_tokens=24, seed=5)
    out = StringIO()
    call_command("replay", str(greedy.id), str(sampled.id), stdout=out)
    lines = out.getvalue().splitlines()
    assert lines == [
        f"{greedy.id}: identical ({greedy.steps} steps)",
        f"{sampled.id}: identical ({sampled.steps} steps)",
    ]


def test_manage_py_replay_names_the_first_divergence_and_fails(run_job, settings):
    from io import StringIO

    from django.core.management import CommandError, call_command

    job = run_job(max_tokens=20, temperature=1.0)
    settings.PATHFINDER_STUB_DRAFT_NOISE = 2.0
    runtime._loaded.clear()  # a process whose draft model is not the recorded one
    out = StringIO()
    try:
        with pytest.raises(CommandError, match="2 of 2 jobs did not replay identical"):
            call_command("replay", str(job.id), "not-a-job", stdout=out)
    finally:
        runtime._loaded.clear()
    first, unknown = out.getvalue().splitlines()
    assert first.startswith(f"{job.id}: differs at step 0, field draft: recorded ")
    assert "noise=2.0" in first
    assert unknown == "not-a-job: no such job"


def test_records_from_before_logprobs_still_compare_identical():
    """A recording made before records held the model's own logprobs (docs/adr/0019) has no
    `logprobs` and ranks its alternatives by the warped p: neither counts as a divergence from
    a replay that has both, and every other field is still compared."""
    replayed_step = {
        "step": 0,
        "emitted": [5],
        "logprobs": ["-0.25"],
        "target_top": [[{"token": 5, "logprob": "-0.25"}, {"token": 7, "logprob": "-2.0"}]],
    }
    recorded_step = {"step": 0, "emitted": [5], "target_top": [[{"token": 5, "p": "1.0"}]]}
    assert differing_fields(recorded_step, replayed_step) == []
    assert differing_fields({**recorded_step, "emitted": [6]}, replayed_step) == ["emitted"]
    assert differing_fields({**replayed_step, "logprobs": ["-0.5"]}, replayed_step) == ["logprobs"]

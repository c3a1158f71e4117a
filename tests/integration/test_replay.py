"""Invariant 4: re-running a recorded job reproduces every decision field but the timings."""

import pytest

from decoding import runtime
from decoding.models import Replay
from decoding.replay import replay_request, replay_run


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

    from decoding.execution import job_run
    from decoding.models import GenerationJob

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

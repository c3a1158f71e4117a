"""Log-probabilities on /v1 come from the decision records the trail holds, so what an
application reads as confidence is what a reviewer can verify. The end-to-end path with the
official client against a live stack is in tests/system/test_api_openai_client.py."""

import math

import pytest

from audit.verification import verify_trails
from decoding import tokenizers
from decoding.engine.sampling import log_softmax
from decoding.models import GenerationJob, ModelSpec
from decoding.protocol import openai_shapes as shapes
from decoding.protocol.logprobs import token_logprobs
from decoding.selectors import job_decisions
from decoding.services import job_submit, replay_request
from decoding.worker import runtime
from decoding.worker.execution import job_run
from decoding.worker.replay import replay_run

MODEL = "smollm2-135m-instruct"
CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "Name three primary colours."}]}


@pytest.fixture
def recorded_top(db):
    """The default spec, allowed to keep up to 5 alternatives per token."""
    ModelSpec.objects.filter(name=MODEL).update(top_logprobs=5)


def run(owner, **params) -> GenerationJob:
    job, _ = job_submit(
        matter=owner.key.matter,
        api_key=owner.key,
        model=MODEL,
        messages=[{"role": "user", "content": "Name three primary colours."}],
        max_tokens=24,
        enqueue=False,
        **params,
    )
    job_run(job_id=job.id)
    job.refresh_from_db()
    assert job.status == "succeeded", job.error
    return job


def entries_of(job, top):
    return token_logprobs(job_decisions(job), tokenizers.tokenizer_for(job.model_spec), top)


def test_each_tokens_logprob_is_the_one_its_record_states(owner):
    job = run(owner, temperature=0.7, seed=3)
    entries = entries_of(job, 0)
    assert [e.chosen.token for e in entries] == job.output_token_ids
    recorded = [float(v) for record in job_decisions(job) for v in record["logprobs"]]
    assert [e.chosen.logprob for e in entries] == recorded
    assert all(e.chosen.logprob <= 0 for e in entries)
    assert b"".join(e.chosen.bytes for e in entries).decode() == job.output_text
    body = shapes.response(job, shapes.CHAT, entries)["choices"][0]["logprobs"]
    assert [c["token"] for c in body["content"]] == [e.chosen.text for e in entries]
    assert all(c["top_logprobs"] == [] for c in body["content"])


def test_the_default_sampling_does_not_flatten_logprobs_to_zero(owner):
    """At the spec's defaults (the model card's temperature 0.2, top-p 0.9) most chosen tokens
    have a sampled p of 1.0; their logprob is the model's own, recomputed here from the target."""
    job = run(owner)
    assert (job.temperature, job.top_p) == (0.2, 0.9)
    entries = entries_of(job, 0)
    records = list(job_decisions(job))
    sampled_p = [
        record["drafted"][i]["p"] if i < record["accepted_count"] else record["correction"]["p"]
        for record in records
        for i, _ in enumerate(record["emitted"])
    ]
    assert sampled_p.count("1.0") > len(sampled_p) / 2  # what log(p) would have made 0.0
    assert sum(e.chosen.logprob == 0.0 for e in entries) < len(entries) / 4
    models, _ = runtime.models_for(job.model_spec)
    context = list(job.prompt_token_ids)
    for record in records:
        emitted = record["emitted"]
        own = log_softmax(models.target.logits(context + emitted[:-1], len(emitted)))
        for i, token in enumerate(emitted):
            assert math.isclose(float(record["logprobs"][i]), own[i, token], abs_tol=1e-9)
        context += emitted


def test_a_job_that_did_not_ask_keeps_no_alternatives(owner):
    job = run(owner)
    assert all("target_top" not in record for record in job_decisions(job))


def test_asked_alternatives_are_recorded_sorted_and_verified(owner, recorded_top):
    job = run(owner, temperature=0, top_logprobs=3)
    assert job.top_logprobs == 3
    entries = entries_of(job, 3)
    for entry in entries:
        assert 1 <= len(entry.top) <= 3
        logprobs = [alt.logprob for alt in entry.top]
        assert logprobs == sorted(logprobs, reverse=True)
        # Greedy: the chosen token is the target's most probable one.
        assert entry.top[0].token == entry.chosen.token
        assert entry.top[0].logprob == entry.chosen.logprob
    assert verify_trails([job.trail_id], scope="test").ok
    completion = shapes.logprobs(shapes.COMPLETION, entries)
    assert completion["tokens"] == [e.chosen.text for e in entries]
    assert completion["text_offset"][0] == 0
    assert all(len(top) <= 3 for top in completion["top_logprobs"])


def test_the_alternatives_are_the_models_own_whatever_top_p_cut(owner, recorded_top):
    """OpenAI's top_logprobs come from the model's distribution, not the sampled one: at
    top-p 0.5 and temperature 0.2 the sampled distribution mostly holds one token, yet each
    position lists five alternatives, whose probabilities sum to at most 1."""
    job = run(owner, temperature=0.2, top_p=0.5, top_logprobs=5)
    for record in job_decisions(job):
        for position in record["target_top"]:
            assert len(position) == 5
            assert all(float(alt["logprob"]) <= 0 for alt in position)
            assert sum(math.exp(float(alt["logprob"])) for alt in position) <= 1.0 + 1e-9


def test_a_replay_reproduces_the_recorded_alternatives(owner, recorded_top):
    job = run(owner, temperature=0.8, seed=11, top_logprobs=2)
    replay = replay_request(job=job)
    replay_run(replay_id=replay.id)
    replay.refresh_from_db()
    assert replay.identical, replay.first_divergence


@pytest.mark.parametrize(
    ("path", "body", "param", "says"),
    [
        (
            "/v1/chat/completions",
            {**CHAT, "logprobs": True, "top_logprobs": 3},
            "top_logprobs",
            "at most 0",
        ),
        ("/v1/chat/completions", {**CHAT, "top_logprobs": 2}, "top_logprobs", "logprobs: true"),
        (
            "/v1/chat/completions",
            {**CHAT, "logprobs": True, "top_logprobs": 21},
            "top_logprobs",
            "20",
        ),
        ("/v1/chat/completions", {**CHAT, "logprobs": "yes please"}, "logprobs", "boolean"),
        (
            "/v1/completions",
            {"model": MODEL, "prompt": "Hi", "logprobs": 2},
            "logprobs",
            "at most 0",
        ),
        ("/v1/completions", {"model": MODEL, "prompt": "Hi", "logprobs": -1}, "logprobs", "0"),
    ],
)
def test_logprobs_beyond_what_the_records_hold_are_a_400_naming_the_field(
    owner, path, body, param, says
):
    ModelSpec.objects.filter(name=MODEL).update(top_logprobs=0)  # an operator's spec
    response = owner.api.post(path, body, format="json")
    assert response.status_code == 400, response.json()
    error = response.json()["error"]
    assert error["param"] == param and says in error["message"], error
    assert not GenerationJob.objects.exists()

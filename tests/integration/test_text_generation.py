"""Text in, text out on the real default model (SmolLM2-135M-Instruct in llama.cpp), decoded in
this process the way a worker does it."""

import json

import pytest
from django.core.exceptions import ValidationError

from audit.selectors import trail_clear_decisions
from audit.verification import verify_trails
from decoding.models import GenerationJob, ModelSpec
from decoding.worker.execution import job_run

URL = "/api/v1/generations"
DEFAULT_MODEL = "smollm2-135m-instruct"


def generate(owner, **body) -> GenerationJob:
    response = owner.api.post(
        URL, data=json.dumps({"model": DEFAULT_MODEL, **body}), content_type="application/json"
    )
    assert response.status_code == 202, response.json()
    job_run(job_id=response.json()["id"])
    return GenerationJob.objects.get(pk=response.json()["id"])


def records_of(job) -> list[dict]:
    return trail_clear_decisions(trail_id=job.trail_id)


def test_a_text_prompt_returns_text_and_every_record_carries_token_texts(owner):
    job = generate(owner, prompt="The capital of France is", max_tokens=12, temperature=0)
    assert job.status == "succeeded", job.error
    assert job.output_text.strip()
    records = records_of(job)
    pieces = [piece for record in records for piece in record["emitted_text"]]
    assert "".join(pieces) == job.output_text
    for record in records:
        assert len(record["emitted_text"]) == len(record["emitted"])
        assert all("text" in drafted for drafted in record["drafted"])
        assert record["target"]["runtime"] == "llama.cpp"
    assert verify_trails([job.trail_id], scope="test").ok


def test_chat_messages_go_through_the_models_template(owner):
    job = generate(
        owner,
        messages=[{"role": "user", "content": "Say hello."}],
        max_tokens=16,
        temperature=0,
    )
    assert job.status == "succeeded", job.error
    assert "<|im_start|>user\nSay hello.<|im_end|>" in job.prompt_text
    assert job.prompt_text.endswith("<|im_start|>assistant\n")
    assert job.output_text.strip()


def test_a_stop_string_ends_the_text_before_it_and_the_trail_keeps_every_token(owner):
    free = generate(owner, prompt="One, two, three, four, five,", max_tokens=24, temperature=0)
    word = free.output_text.split()[2]
    job = generate(
        owner, prompt="One, two, three, four, five,", max_tokens=24, temperature=0, stop=[word]
    )
    assert job.stop_reason == "stop"
    assert word not in job.output_text
    assert free.output_text.startswith(job.output_text)
    assert records_of(job)[-1]["stop"] == "stop"
    emitted = [t for record in records_of(job) for t in record["emitted"]]
    assert emitted == job.output_token_ids


def test_every_job_reports_its_timings(owner):
    job = generate(owner, prompt="Count: 1, 2, 3,", max_tokens=16, temperature=0)
    body = owner.api.get(f"{URL}/{job.id}").json()
    timings = body["timings"]
    assert set(timings) == {
        "queue_ms", "load_ms", "prefill_ms", "cached_prompt_tokens", "decode_ms", "audit_ms",
    }  # fmt: skip
    assert timings["decode_ms"] > 0 and timings["prefill_ms"] > 0
    assert 0 <= timings["audit_ms"] < timings["decode_ms"]
    assert 0 <= timings["cached_prompt_tokens"] < len(job.prompt_token_ids)
    again = generate(owner, prompt="Count: 1, 2, 3,", max_tokens=16, temperature=0)
    assert again.load_ms == 0, "a warm worker does not load the model again"
    assert again.output_token_ids == job.output_token_ids
    # The same prompt again: all of it but its last token was cached (that one is evaluated
    # with the first step, whose logits it needs).
    assert again.cached_prompt_tokens == len(job.prompt_token_ids) - 1


def test_a_draft_whose_vocabulary_differs_is_refused_when_the_spec_is_configured(db):
    spec = ModelSpec(
        name="mismatched",
        provider="stub",
        drafter="draft_model",
        drafter_settings={"provider": "llamacpp", "path": ""},
    )
    with pytest.raises(ValidationError) as refused:
        spec.full_clean()
    message = " ".join(refused.value.message_dict["drafter_settings"])
    assert "49152" in message and "32" in message and "tokenizer" in message


def test_the_default_specs_pass_their_own_configuration_check(db):
    for spec in ModelSpec.objects.all():
        spec.full_clean()

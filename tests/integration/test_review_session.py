"""A reviewer's session on the real default model: a second question about a document skips its
prefill (timings.cached_prompt_tokens), drafts may copy from the same matter's earlier jobs and
never another's, every such draft reads back from its source, and replay reproduces it all."""

import json

import pytest

from decoding.models import GenerationJob
from decoding.worker import references
from decoding.worker.execution import job_run
from tests.integration.test_replay import replayed

DOCUMENT = (
    "Grant of Copyright License. Subject to the terms and conditions of this License, each "
    "Contributor hereby grants to You a perpetual, worldwide, non-exclusive, no-charge, "
    "royalty-free, irrevocable copyright license to reproduce, prepare Derivative Works of, "
    "publicly display, publicly perform, sublicense, and distribute the Work and such "
    "Derivative Works in Source or Object form."
)


@pytest.fixture(autouse=True)
def fresh_worker_memory():
    references.forget_all()
    yield
    references.forget_all()


def generate(client, **body) -> GenerationJob:
    body = {"model": "smollm2-135m-instruct", "temperature": 0.0, "max_tokens": 40, **body}
    response = client.post("/api/v1/generations", data=json.dumps(body),
                           content_type="application/json")  # fmt: skip
    assert response.status_code == 202, response.json()
    job_run(job_id=response.json()["id"])
    job = GenerationJob.objects.get(pk=response.json()["id"])
    assert job.status == "succeeded", job.error
    return job


def decisions(job) -> list[dict]:
    from audit.selectors import trail_clear_decisions

    return trail_clear_decisions(trail_id=job.trail_id)


def test_a_second_question_about_a_document_reports_its_cached_prompt_tokens(owner):
    first = generate(owner.api, prompt=f"{DOCUMENT}\n\nWho grants the license?")
    second = generate(owner.api, prompt=f"{DOCUMENT}\n\nWhat may You distribute?")
    body = owner.api.get(f"/api/v1/generations/{second.id}").json()
    shared = len(first.prompt_token_ids) - 8  # all but the question's few tokens
    assert body["timings"]["cached_prompt_tokens"] >= shared
    assert first.cached_prompt_tokens < body["timings"]["cached_prompt_tokens"]


def test_a_later_job_of_the_matter_copies_from_an_earlier_ones_answer(owner, outsider):
    # The second prompt is the first job's prompt and the start of its answer: the rest of that
    # answer is in no context, only in the first job's remembered prompt and output.
    first = generate(owner.api, prompt=f"{DOCUMENT}\n\nRepeat the license grant word for word:")
    resumed = [*first.prompt_token_ids, *first.output_token_ids[:6]]
    second = generate(owner.api, prompt_token_ids=resumed, max_tokens=24)
    copied = [
        d for d in decisions(second) if (d["draft_source"] or {}).get("reference") == str(first.id)
    ]
    assert copied, "no draft came from the earlier job"
    source = [*first.prompt_token_ids, *first.output_token_ids]
    for record in copied:
        tokens = [d["token"] for d in record["drafted"]]
        offset = record["draft_source"]["offset"]
        assert source[offset : offset + len(tokens)] == tokens
        assert record["draft_source"]["match_length"] >= 3
    replay = replayed(second)
    assert replay.status == "done", replay.error
    assert replay.identical is True, replay.first_divergence

    # Another matter sending the same tokens never drafts from Doe v. Roe's jobs.
    other = generate(outsider.api, prompt_token_ids=resumed, max_tokens=24)
    named = {(d["draft_source"] or {}).get("reference") for d in decisions(other)}
    assert named <= {None, "context"}


def test_a_replay_refuses_a_draft_its_source_does_not_hold(owner):
    first = generate(owner.api, prompt=f"{DOCUMENT}\n\nRepeat the license grant word for word:")
    resumed = [*first.prompt_token_ids, *first.output_token_ids[:6]]
    second = generate(owner.api, prompt_token_ids=resumed, max_tokens=24)
    assert any(
        (d["draft_source"] or {}).get("reference") == str(first.id) for d in decisions(second)
    )
    # The earlier job's row no longer holds what was copied (as if it had been rewritten).
    GenerationJob.objects.filter(pk=first.id).update(
        output_token_ids=[0] * len(first.output_token_ids)
    )
    replay = replayed(second)
    assert replay.status == "failed"
    assert str(first.id) in replay.error and "draft" in replay.error

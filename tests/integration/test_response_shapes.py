"""Every response body is held to its one declaration, the output serializer the OpenAPI schema
is made from (decoding.protocol.declared.as_declared): the native job and its error, `/v1`
completion and chat completion, the model list, a Batch API batch, its file and their lists
(issue 45 item 4). Here, on real answers: each writer's body has exactly its declared fields,
nested objects included, and a writer that gains or loses a field fails when it writes."""

from __future__ import annotations

import json

import pytest

from decoding import batches
from decoding.models import GenerationJob, ModelSpec
from decoding.protocol import batch_shapes, openai_out
from decoding.protocol import openai_shapes as shapes
from decoding.protocol.declared import UndeclaredShape, as_declared
from decoding.web.api.schema import GenerationOut
from decoding.worker.execution import job_run


def assert_same_fields(answer: dict, declaration) -> None:
    """The answer as the client received it (after JSON), held to its declaration field for
    field (as_declared raises UndeclaredShape naming the first difference)."""
    as_declared(declaration, json.loads(json.dumps(answer, default=str)))


def test_a_native_jobs_answer_and_error_are_their_declarations(owner):
    created = owner.api.post(
        "/api/v1/generations",
        {"prompt_token_ids": [4, 5], "max_tokens": 6, "temperature": 0},
        format="json",
    )
    job_run(job_id=created.json()["id"])
    assert_same_fields(owner.api.get(created["Location"]).json(), GenerationOut)
    refused = owner.api.post("/api/v1/generations", {"prompt": "Hi", "top_p": 0}, format="json")
    assert refused.status_code == 400 and refused.json()["error"]["field"] == "top_p"


@pytest.mark.parametrize(
    ("kind", "out"),
    [(shapes.COMPLETION, openai_out.CompletionOut), (shapes.CHAT, openai_out.ChatCompletionOut)],
)
def test_an_openai_answer_is_its_declaration(run_job, kind, out):
    job = run_job(max_tokens=6)
    assert_same_fields(shapes.response(job, kind), out)


def test_the_model_list_is_its_declaration(owner):
    # A spec's defaults may set a seed or an end token too, which the declaration allows.
    ModelSpec.objects.filter(name="stub").update(default_params={"seed": 7, "temperature": 0.2})
    listed = owner.api.get("/v1/models")
    assert listed.status_code == 200
    assert_same_fields(listed.json(), openai_out.ModelListOut)
    (stub,) = [model for model in listed.json()["data"] if model["id"] == "stub"]
    assert stub["default_params"]["seed"] == 7


def test_a_batch_its_file_and_their_lists_are_their_declarations(owner):
    line = {"custom_id": "a", "method": "POST", "url": "/v1/completions",
            "body": {"model": "stub", "prompt": [1, 2, 3], "max_tokens": 4}}  # fmt: skip
    stored = batches.file_upload(matter=owner.key.matter, api_key=owner.key, filename="a.jsonl",
                                 content=[json.dumps(line).encode()], purpose="batch")  # fmt: skip
    assert_same_fields(batch_shapes.file_object(stored), openai_out.FileOut)
    batch = batches.batch_create(matter=owner.key.matter, api_key=owner.key,
                                 input_file_id=stored.pk, endpoint="/v1/completions",
                                 completion_window="24h")  # fmt: skip
    batches.batches_advance()
    job_run(job_id=GenerationJob.objects.get(batch_line__batch=batch).pk)
    counts = {"total": 1, "completed": 1, "failed": 0}
    assert_same_fields(batch_shapes.batch_object(batch, counts), openai_out.BatchOut)
    for path in ("/v1/files", "/v1/batches"):
        listed = owner.api.get(path)
        assert listed.status_code == 200, listed.content
        assert_same_fields(listed.json(), openai_out.ListOut)


def test_a_writer_that_gains_or_loses_a_field_fails_naming_it(run_job, monkeypatch):
    job = run_job(max_tokens=6)
    real = shapes.pathfinder
    monkeypatch.setattr(shapes, "pathfinder", lambda job: {**real(job), "worker": "w1"})
    with pytest.raises(UndeclaredShape, match=r"CompletionOut\.pathfinder\.worker is written"):
        shapes.response(job, shapes.COMPLETION)
    monkeypatch.setattr(shapes, "pathfinder", real)
    real_usage = shapes.usage

    def without_total(job, answer):
        usage = real_usage(job, answer)
        del usage["total_tokens"]
        return usage

    monkeypatch.setattr(shapes, "usage", without_total)
    with pytest.raises(UndeclaredShape, match=r"usage\.total_tokens is declared but not written"):
        shapes.response(job, shapes.CHAT)


def test_list_items_and_optional_fields_are_held_too():
    chat = {"id": "c", "object": "chat.completion", "created": 1, "model": "m",
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2,
                      "prompt_tokens_details": {"cached_tokens": 0}},
            "pathfinder": {"job_id": "j", "status": "succeeded", "trail_id": None,
                           "record_count": 0, "head_hash": None, "drafted": 0, "accepted": 0,
                           "acceptance_rate": 0.0}}  # fmt: skip
    choice = {"index": 0, "message": {"role": "assistant", "content": ""}, "logprobs": None,
              "finish_reason": None}  # fmt: skip
    as_declared(openai_out.ChatCompletionOut, {**chat, "choices": [choice]})
    stray = {**choice, "message": {"role": "assistant", "content": "", "name": "x"}}
    with pytest.raises(UndeclaredShape, match=r"choices\[1\]\.message\.name is written"):
        as_declared(openai_out.ChatCompletionOut, {**chat, "choices": [choice, stray]})
    # The native error's `fields` is declared optional (required=False): absent is its shape.
    from decoding.protocol.errors import ErrorOut

    error = {"status": 400, "code": "invalid", "field": "top_p", "message": "top_p: no"}
    as_declared(ErrorOut, {"error": error})
    as_declared(ErrorOut, {"error": {**error, "fields": {"top_p": ["no"]}}})

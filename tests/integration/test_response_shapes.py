"""Response shapes are written by hand (decoding/web/api/serializers.py, decoding/protocol/
openai_shapes.py and batch_shapes.py) and declared again for the OpenAPI schema
(decoding/web/*/schema.py). Here the two are held to the same fields, nested objects included,
on real answers: a field added to one side and not the other fails (issue 45 item 4)."""

from __future__ import annotations

import json

import pytest

from decoding import batches
from decoding.models import GenerationJob
from decoding.protocol import batch_shapes
from decoding.protocol import openai_shapes as shapes
from decoding.web.api.schema import GenerationOut
from decoding.web.openai_api import schema as openai_schema
from decoding.worker.execution import job_run


def declared(serializer) -> dict:
    """The fields an output serializer declares, nested ones as their own fields."""
    fields = {}
    for name, field in serializer.fields.items():
        child = getattr(field, "child", field)
        fields[name] = declared(child) if hasattr(child, "fields") else None
    return fields


def written(value) -> dict | None:
    """The keys an answer writes, nested objects as their own keys (a list: its first item)."""
    if isinstance(value, list):
        return written(value[0]) if value and isinstance(value[0], dict) else None
    if not isinstance(value, dict):
        return None
    return {key: written(inner) for key, inner in value.items()}


def assert_same_fields(answer: dict, serializer) -> None:
    shape, schema = written(answer), declared(serializer)
    # Objects the schema leaves open (JSONField), and objects this answer has none of (null),
    # are compared by name only.
    for name, fields in schema.items():
        if fields is None or shape.get(name) is None:
            shape[name] = schema[name] = None
    assert shape == schema


def test_a_native_jobs_answer_writes_exactly_the_fields_its_schema_declares(owner):
    created = owner.api.post(
        "/api/v1/generations",
        {"prompt_token_ids": [4, 5], "max_tokens": 6, "temperature": 0},
        format="json",
    )
    job_run(job_id=created.json()["id"])
    assert_same_fields(owner.api.get(created["Location"]).json(), GenerationOut())


@pytest.mark.parametrize(
    ("kind", "out"),
    [
        (shapes.COMPLETION, openai_schema.CompletionOut()),
        (shapes.CHAT, openai_schema.ChatCompletionOut()),
    ],
)
def test_an_openai_answer_writes_exactly_the_fields_its_schema_declares(run_job, kind, out):
    job = run_job(max_tokens=6)
    assert_same_fields(shapes.response(job, kind), out)


def test_a_batch_and_its_file_write_exactly_the_fields_their_schema_declares(owner):
    line = {"custom_id": "a", "method": "POST", "url": "/v1/completions",
            "body": {"model": "stub", "prompt": [1, 2, 3], "max_tokens": 4}}  # fmt: skip
    stored = batches.file_upload(matter=owner.key.matter, api_key=owner.key, filename="a.jsonl",
                                 content=[json.dumps(line).encode()], purpose="batch")  # fmt: skip
    assert_same_fields(batch_shapes.file_object(stored), openai_schema.FileOut())
    batch = batches.batch_create(matter=owner.key.matter, api_key=owner.key,
                                 input_file_id=stored.pk, endpoint="/v1/completions",
                                 completion_window="24h")  # fmt: skip
    batches.batches_advance()
    job_run(job_id=GenerationJob.objects.get(batch_line__batch=batch).pk)
    counts = {"total": 1, "completed": 1, "failed": 0}
    assert_same_fields(batch_shapes.batch_object(batch, counts), openai_schema.BatchOut())

"""Issue 40 item 6: GET /v1/models lists only what this installation can serve, a request for a
model it cannot serve is a 400 on `model` saying what to install, and a model that fails to load
on the worker fails its job with a reason the caller reads.

This machine has torch and transformers (the dev extra), so the tests hide them the way an
installation without the `hf` extra lacks them: importlib finds no such package. That lookup is
the only thing stood in for; the views, the worker and the database are real.
"""

import importlib.util

import pytest

from decoding.models import GenerationJob, ModelSpec
from decoding.services import job_submit
from decoding.worker.execution import job_run

from .conftest import JOB_DEFAULTS

HF_SPEC = "smollm2-135m-hf-quantized-draft"


@pytest.fixture
def without_torch(monkeypatch):
    found = importlib.util.find_spec

    def find_spec(name, *args, **kwargs):
        return None if name.split(".")[0] in ("torch", "transformers") else found(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)


def listed(client) -> list[str]:
    response = client.get("/v1/models")
    assert response.status_code == 200
    return [model["id"] for model in response.json()["data"]]


def test_every_installed_kind_is_listed(owner):
    names = listed(owner.api)
    assert HF_SPEC in names and "smollm2-135m-instruct" in names


def test_a_model_this_installation_cannot_load_is_not_listed_and_is_refused_by_name(
    owner, without_torch
):
    assert HF_SPEC not in listed(owner.api)
    assert "smollm2-135m-instruct" in listed(owner.api)
    before = GenerationJob.objects.count()
    response = owner.api.post(
        "/v1/completions",
        {"model": HF_SPEC, "prompt": "The tenant shall", "max_tokens": 4},
        format="json",
    )
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert error["param"] == "model"
    assert "torch and transformers are not installed" in error["message"]
    assert "pip install" in error["message"]
    assert GenerationJob.objects.count() == before  # nothing queued, nothing recorded


def test_a_model_that_fails_to_load_fails_its_job_with_a_reason_the_caller_reads(owner):
    default = ModelSpec.objects.get(name="smollm2-135m-instruct")
    spec = ModelSpec.objects.create(
        name="vanishing",
        provider=default.provider,
        path=default.path,
        revision=default.revision,
        drafter=default.drafter,
        drafter_settings=default.drafter_settings,
    )
    job, _ = job_submit(
        matter=owner.key.matter,
        api_key=owner.key,
        model="vanishing",
        prompt="The tenant shall",
        **JOB_DEFAULTS,
    )
    ModelSpec.objects.filter(pk=spec.pk).update(path="/nowhere/vanished.gguf")  # gone since
    job_run(job_id=job.id)
    job.refresh_from_db()
    assert (job.status, job.failure) == ("failed", "model_unavailable")
    shown = owner.api.get(f"/api/v1/generations/{job.id}").json()
    assert shown["failure"] == "model_unavailable"
    assert "could not load the model" in shown["error"]
    assert "/nowhere" not in str(shown)  # the cause goes to the operator's log, not the caller

"""/v1/* refuses what it does not support with OpenAI's error object, naming the parameter, and
stores nothing. (Successful completions run against a live stack: tests/system.)"""

import pytest
from rest_framework.test import APIClient

from decoding.models import GenerationJob
from decoding.protocol.openai_input import ChatCompletionInput, CompletionInput


@pytest.mark.parametrize(
    ("path", "body", "param", "says"),
    [
        ("/v1/completions", {"prompt": "hi", "n": 2}, "n", "n=1"),
        ("/v1/completions", {"prompt": "hi", "logit_bias": {"50": 5}}, "logit_bias", "empty map"),
        ("/v1/completions", {"prompt": "hi", "presence_penalty": 0.5}, "presence_penalty", "0"),
        ("/v1/completions", {"prompt": "hi", "frequency_penalty": -1}, "frequency_penalty", "0"),
        ("/v1/completions", {"prompt": "hi", "best_of": 2}, "best_of", "Unsupported"),
        (
            "/v1/completions",
            {"prompt": "hi", "model": "gpt-4o-mini"},
            "model",
            "smollm2-135m-instruct, stub.",
        ),
        ("/v1/completions", {}, "prompt", "required"),
        ("/v1/completions", {"prompt": ["a", "b"]}, "prompt", "one prompt"),
        ("/v1/completions", {"prompt": [1, 99999]}, "prompt", "vocabulary"),
        ("/v1/completions", {"prompt": "hi", "model": "gpt-4"}, "model", "gpt-4"),
        ("/v1/completions", {"prompt": "hi", "temperature": 3}, "temperature", "2"),
        ("/v1/chat/completions", {"messages": []}, "messages", "empty"),
        (
            "/v1/chat/completions",
            {"messages": [{"role": "tool", "content": "x"}]},
            "messages",
            "tool",
        ),
        (
            "/v1/chat/completions",
            {"messages": [{"role": "user", "content": "x"}], "n": 3},
            "n",
            "n=1",
        ),
    ],
)
def test_unsupported_or_invalid_input_is_a_400_naming_the_parameter(owner, path, body, param, says):
    response = owner.api.post(path, body, format="json")
    assert response.status_code == 400, response.json()
    error = response.json()["error"]
    assert (error["type"], error["param"]) == ("invalid_request_error", param)
    assert says in error["message"]
    assert not GenerationJob.objects.exists()


NEUTRAL = {
    "presence_penalty": 0,
    "frequency_penalty": 0.0,
    "logit_bias": {},
    "n": 1,
    "user": "someone@example.com",
    "stream_options": None,
}


@pytest.mark.parametrize(
    ("shape", "body"),
    [
        (CompletionInput, {"prompt": [1, 2, 3], "max_tokens": 4}),
        (ChatCompletionInput, {"messages": [{"role": "user", "content": "x"}], "seed": 7}),
    ],
)
def test_values_that_change_nothing_are_accepted_and_change_nothing(shape, body):
    """What the openai client and its wrappers send by default is accepted, and the request is
    the one made without them (parallel_tool_calls too: without tools it has nothing to do)."""
    extra = {"parallel_tool_calls": False} if shape is ChatCompletionInput else {}
    plain, wrapped = shape(data=body), shape(data={**body, **NEUTRAL, **extra})
    assert plain.is_valid(), plain.errors
    assert wrapped.is_valid(), wrapped.errors
    assert wrapped.native() == {**plain.native(), "directed_by": NEUTRAL["user"]}


def test_no_key_is_a_401_in_openai_shape(db):
    response = APIClient().post("/v1/completions", {"prompt": "hi"}, format="json")
    assert response.status_code == 401
    assert response.json()["error"]["type"] == "authentication_error"


def test_models_lists_the_specs(owner):
    body = owner.api.get("/v1/models").json()
    assert body["object"] == "list"
    names = [m["id"] for m in body["data"]]
    assert "smollm2-135m-instruct" in names and "stub" in names
    assert all(m["object"] == "model" for m in body["data"])


def test_the_schema_is_served_and_names_every_endpoint(client):
    schema = client.get("/api/schema/", HTTP_ACCEPT="application/json").json()
    assert {
        "/v1/completions",
        "/v1/chat/completions",
        "/v1/models",
        "/api/v1/generations",
        "/api/v1/generations/{job_id}",
        "/api/v1/generations/{job_id}/cancel",
        "/api/v1/generations/{job_id}/trail",
    } <= set(schema["paths"])
    assert client.get("/api/docs/").status_code == 200


@pytest.fixture
def remote_spec(db):
    from decoding.models import ModelSpec

    return ModelSpec.objects.create(
        name="remote-smollm2",
        provider="remote",
        path="",  # the bundled GGUF: its vocabulary tokenises for the server
        provider_settings={"base_url": "http://127.0.0.1:9/v1", "top_logprobs": 10},
        drafter="prompt_lookup",
        drafter_settings={"min_ngram": 3, "max_ngram": 3},
    )


@pytest.mark.parametrize(
    ("params", "says"),
    [
        ({"temperature": 0.7}, "top 10 log-probabilities"),
        ({"temperature": 0.7, "top_k": 11}, "exceeds"),
    ],
)
def test_a_remote_model_refuses_sampling_it_cannot_do_exactly(owner, remote_spec, params, says):
    response = owner.api.post(
        "/api/v1/generations",
        {"model": "remote-smollm2", "prompt": "Hello", **params},
        format="json",
    )
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["field"] == "top_k" and says in error["message"]
    assert not GenerationJob.objects.exists()
    greedy = {"model": "remote-smollm2", "prompt": "Hello", "temperature": 0}
    assert owner.api.post("/api/v1/generations", greedy, format="json").status_code == 202


def test_a_remote_spec_needs_a_base_url(db):
    from django.core.exceptions import ValidationError

    from decoding.models import ModelSpec

    spec = ModelSpec(
        name="no-url", provider="remote", drafter="prompt_lookup", provider_settings={}
    )
    with pytest.raises(ValidationError, match="base_url"):
        spec.full_clean()

"""Every POST endpoint answers a hostile corpus with a 4xx naming the field, and writes nothing
(issue 23: what a hostile client found; the cases were written before the fix). Raw bodies, not
the test client's encoder, so a lone surrogate or a 5,000-deep nesting reaches the server as a
client would send it."""

from __future__ import annotations

import pytest
from django.test import Client

from audit.models import Trail
from decoding.models import GenerationJob

NATIVE, COMPLETIONS, CHAT = "/api/v1/generations", "/v1/completions", "/v1/chat/completions"
PROMPT = {NATIVE: '"prompt": "Hi"', COMPLETIONS: '"prompt": "Hi"',
          CHAT: '"messages": [{"role": "user", "content": "Hi"}]'}  # fmt: skip
DEEP = "[" * 5000 + "]" * 5000  # about 10 KB, far under the body limit

# (case, the JSON members after the prompt, the field named, the native field if another)
CORPUS = [
    ("top_k of 2^31", '"top_k": 2147483648', "top_k"),
    ("max_tokens of 2^40", '"max_tokens": 1099511627776', "max_tokens"),
    ("a NUL in a stop string", '"stop": ["a\\u0000b"]', "stop"),
    ("a lone surrogate in a stop string", '"stop": "\\ud800"', "stop"),
    ("max_tokens as a string", '"max_tokens": "5"', "max_tokens"),
    ("temperature as a string", '"temperature": "0.5"', "temperature"),
    ("seed as a boolean", '"seed": true', "seed"),
    ("a nesting 5,000 deep", f'"stop": {DEEP}', "body"),
]
PROMPTS = [  # the prompt itself, per endpoint
    (NATIVE, "a prompt that is a number", '"prompt": 123', "prompt"),
    (NATIVE, "a NUL in the prompt", '"prompt": "a\\u0000b"', "prompt"),
    (NATIVE, "a message that is not an object", '"messages": ["Hi"]', "messages"),
    (
        NATIVE,
        "a lone surrogate in a message",
        '"messages": [{"role": "user", "content": "\\udfff"}]',
        "messages",
    ),  # fmt: skip
    (
        NATIVE,
        "an unknown message key",
        '"messages": [{"role": "user", "content": "Hi", "name": "x"}]',
        "messages",
    ),  # fmt: skip
    (COMPLETIONS, "a NUL in the prompt", '"prompt": "a\\u0000b"', "prompt"),
    (COMPLETIONS, "a token id of 2^31", '"prompt": [2147483648]', "prompt"),
    (
        CHAT,
        "a lone surrogate in a message",
        '"messages": [{"role": "user", "content": "\\udfff"}]',
        "messages",
    ),  # fmt: skip
    (
        CHAT,
        "an unknown message key",
        '"messages": [{"role": "user", "content": "Hi", "name": "x"}]',
        "messages",
    ),  # fmt: skip
]


def refused(owner, path: str, body: str) -> dict:
    client = Client(HTTP_AUTHORIZATION=f"Bearer {owner.raw}")
    response = client.post(path, body.encode("utf-8"), content_type="application/json")
    assert response.status_code == 400, (path, body[:80], response.status_code, response.content)
    error = response.json()["error"]
    assert not GenerationJob.objects.exists() and not Trail.objects.exists()
    return error


def named(path: str, error: dict) -> str:
    return error["param"] if path.startswith("/v1/") else error["field"]


@pytest.mark.parametrize("path", [NATIVE, COMPLETIONS, CHAT])
@pytest.mark.parametrize(("case", "members", "field"), CORPUS, ids=[c[0] for c in CORPUS])
def test_every_post_endpoint_refuses_the_corpus_naming_the_field(owner, path, case, members, field):
    error = refused(owner, path, "{" + PROMPT[path] + ", " + members + "}")
    assert named(path, error) == field, (case, error)


@pytest.mark.parametrize(("path", "case", "members", "field"), PROMPTS, ids=[p[1] for p in PROMPTS])
def test_a_hostile_prompt_is_refused_naming_it(owner, path, case, members, field):
    error = refused(owner, path, "{" + members + "}")
    assert named(path, error).startswith(field), (case, error)
    assert "non_field_errors" not in error["message"], error  # DRF's name, not the request's


@pytest.mark.parametrize("path", [NATIVE, COMPLETIONS])
def test_an_oversized_body_is_a_413_in_each_api_s_own_shape(owner, path, settings):
    settings.PATHFINDER_MAX_BODY_BYTES = 2048
    client = Client(HTTP_AUTHORIZATION=f"Bearer {owner.raw}")
    body = '{"prompt": "' + "x" * 4096 + '"}'
    response = client.post(path, body, content_type="application/json")
    assert response.status_code == 413
    error = response.json()["error"]
    if path.startswith("/v1/"):
        assert (error["type"], error["param"]) == ("invalid_request_error", "body")
    else:
        assert (error["status"], error["field"]) == (413, "body")


@pytest.mark.parametrize("query", ["until=9999-12-31", "since=9999-12-31"])
def test_a_date_past_the_calendar_is_a_400_not_a_500(db, query, fast_passwords):
    from django.contrib.auth import get_user_model

    client = Client()
    client.force_login(get_user_model().objects.create_user("rita", password="pw"))
    response = client.get(f"/portal/?{query}")
    assert response.status_code == 400
    assert query.split("=")[0] in response.content.decode()


# Query strings a hostile client sends to every GET that reads one: past-range numbers, NULs,
# lone surrogates (percent-encoded, as a client sends them), garbage cursors, unknown names.
HOSTILE_VALUES = ["9" * 40, "-1", "%00", "%ED%A0%80", "abc", "1e309", "", "%FF%FE"]
API_QUERIES = ["limit", "cursor", "status", "created_after", "created_before", "nonsense"]
PORTAL_QUERIES = ["page", "since", "until", "matter", "model", "status", "verified", "q"]


def test_every_get_that_reads_a_query_answers_hostile_values_with_no_5xx(run_job, owner, reviewer):
    job = run_job(max_tokens=4)
    api_paths = ["/api/v1/generations", f"/api/v1/generations/{job.id}/trail"]
    portal_paths = ["/portal/", "/portal/custody/", f"/portal/jobs/{job.id}/"]
    answered = {}
    for value in HOSTILE_VALUES:
        for path in api_paths:
            for name in API_QUERIES:
                answered[f"{path}?{name}={value}"] = owner.api.get(f"{path}?{name}={value}")
        for path in portal_paths:
            for name in [*PORTAL_QUERIES, "before", "step"]:
                answered[f"{path}?{name}={value}"] = reviewer.get(f"{path}?{name}={value}")
        answered[f"/portal/jobs/{job.id}/step?step={value}"] = reviewer.get(
            f"/portal/jobs/{job.id}/step?step={value}"
        )
    failing = {url: r.status_code for url, r in answered.items() if r.status_code >= 500}
    assert failing == {}
    # A refused API query names its parameter, in the native error shape.
    refused = owner.api.get(f"/api/v1/generations?limit={'9' * 40}")
    assert refused.status_code in (200, 400)
    for name in ("status", "created_after", "nonsense"):
        bad = owner.api.get(f"/api/v1/generations?{name}=%00")
        assert bad.status_code == 400 and bad.json()["error"]["field"] == name, bad.json()

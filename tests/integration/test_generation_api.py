"""The native REST API against PostgreSQL: submit, read, page a trail; every refusal is a 4xx that
names the field and writes nothing."""

import json

import pytest

from audit.models import DecisionRecord, Trail
from decoding.models import GenerationJob
from decoding.worker.execution import job_run

URL = "/api/v1/generations"


def post(client, body, **extra):
    return client.post(URL, data=json.dumps(body), content_type="application/json", **extra)


def rows_written() -> tuple[int, int, int]:
    return GenerationJob.objects.count(), Trail.objects.count(), DecisionRecord.objects.count()


def test_healthz_answers_with_the_version(client):
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok", "version": "0.1.0"}


def test_a_valid_job_is_stored_queued_after_commit_and_answered_202(
    owner, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks() as callbacks:
        response = post(owner.api, {"prompt_token_ids": [1, 2, 3], "max_tokens": 12, "seed": 5})
    assert response.status_code == 202
    body = response.json()
    assert response["Location"] == f"{URL}/{body['id']}"
    assert body["status"] == "queued"
    assert body["params"]["seed"] == 5
    assert len(callbacks) == 1, "the task is enqueued only once the job row is committed"
    assert GenerationJob.objects.get(pk=body["id"]).matter == owner.key.matter


def test_a_finished_job_reports_output_acceptance_latency_and_its_trail(owner):
    created = post(owner.api, {"prompt_token_ids": [4, 5], "max_tokens": 20, "temperature": 0})
    job_run(job_id=created.json()["id"])

    body = owner.api.get(created["Location"]).json()
    assert body["status"] == "succeeded"
    assert body["error"] is None
    assert len(body["output_token_ids"]) == 20
    assert body["drafted"] >= body["accepted"] >= 0
    assert body["acceptance_rate"] == pytest.approx(body["accepted"] / body["drafted"], abs=1e-6)
    assert body["mean_accepted_length"] == pytest.approx(body["accepted"] / body["steps"], abs=1e-6)
    assert body["latency_ms"] >= 0
    trail = Trail.objects.get(pk=body["trail"]["id"])
    # Its request record, a decision record per step, its answer record.
    assert body["trail"]["records"] == trail.record_count == body["steps"] + 2
    assert body["trail"]["head_hash"] == trail.head_hash


def test_the_trail_pages_through_every_record_in_seq_order(owner):
    created = post(owner.api, {"prompt_token_ids": [1], "max_tokens": 25, "draft_length": 2})
    job_run(job_id=created.json()["id"])
    records, url = [], f"{created['Location']}/trail?limit=3"
    while url:
        page = owner.api.get(url).json()
        records += page["results"]
        url = page["next"]
    job = owner.api.get(created["Location"]).json()
    assert [r["seq"] for r in records] == list(range(job["trail"]["records"]))
    assert records[-1]["record_hash"] == job["trail"]["head_hash"]
    for r in records:  # a decision's tokens are sealed in the payload and opened for its caller
        hashed = json.loads(r["payload"])
        if r["kind"] == "decision":
            assert "emitted" not in hashed and "emitted" in r["decision"]
        else:
            assert hashed == r["decision"]


def test_a_repeated_request_id_returns_the_existing_job_not_a_second_one(owner):
    first = post(owner.api, {"prompt_token_ids": [1, 2], "request_id": "req-42"})
    again = post(owner.api, {"prompt_token_ids": [9, 9, 9], "request_id": "req-42"})
    assert (first.status_code, again.status_code) == (202, 200)
    assert again.json()["id"] == first.json()["id"]
    assert again["Location"] == first["Location"]
    assert GenerationJob.objects.filter(request_id="req-42").count() == 1


def test_the_same_request_id_under_another_key_is_another_job(owner, outsider):
    first = post(owner.api, {"prompt_token_ids": [1], "request_id": "shared"})
    second = post(outsider.api, {"prompt_token_ids": [1], "request_id": "shared"})
    assert second.status_code == 202
    assert second.json()["id"] != first.json()["id"]


BAD_BODIES = [
    ({}, "prompt"),
    ({"prompt_token_ids": [1], "prompt": "and text"}, "prompt_token_ids"),
    ({"prompt_token_ids": [1], "model": "no-such-model"}, "model"),
    ({"prompt": "hello"}, "prompt"),  # the stub pair takes token ids only
    ({"prompt": ""}, "prompt"),
    ({"messages": [{"role": "wizard", "content": "hi"}]}, "messages"),
    ({"messages": []}, "messages"),
    ({"prompt_token_ids": [1], "stop": ["a", "b", "c", "d", "e"]}, "stop"),
    ({"prompt_token_ids": [1], "stop": [""]}, "stop"),
    ({"prompt_token_ids": []}, "prompt_token_ids"),
    ({"prompt_token_ids": "1,2,3"}, "prompt_token_ids"),
    ({"prompt_token_ids": [1, -2]}, "prompt_token_ids"),
    ({"prompt_token_ids": [1, 32]}, "prompt_token_ids"),  # the stub vocabulary has 32 tokens
    ({"prompt_token_ids": [1], "max_tokens": 0}, "max_tokens"),
    ({"prompt_token_ids": [1], "max_tokens": 1025}, "max_tokens"),
    ({"prompt_token_ids": [1], "temperature": -0.1}, "temperature"),
    ({"prompt_token_ids": [1], "temperature": "hot"}, "temperature"),
    ({"prompt_token_ids": [1], "top_k": -1}, "top_k"),
    ({"prompt_token_ids": [1], "top_p": 0}, "top_p"),
    ({"prompt_token_ids": [1], "top_p": 1.5}, "top_p"),
    ({"prompt_token_ids": [1], "seed": -1}, "seed"),
    ({"prompt_token_ids": [1], "seed": 2**60}, "seed"),
    ({"prompt_token_ids": [1], "draft_length": 17}, "draft_length"),
    ({"prompt_token_ids": [1], "eos_token_id": 500}, "eos_token_id"),
    ({"prompt_token_ids": [1], "request_id": "x" * 129}, "request_id"),
    ({"prompt_token_ids": [1], "temprature": 0.5}, "temprature"),
    ([1, 2, 3], "body"),
]


@pytest.mark.parametrize(("body", "field"), BAD_BODIES)
def test_bad_input_is_a_400_naming_the_field_and_writes_nothing(owner, body, field):
    before = rows_written()
    response = post(owner.api, body)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["field"] == field
    assert error["message"].startswith(f"{field}:")
    assert rows_written() == before


@pytest.mark.parametrize(
    "raw", ['{"prompt_token_ids": [1', '{"prompt_token_ids": [1], "temperature": NaN}']
)
def test_malformed_or_non_finite_json_is_a_400_and_writes_nothing(owner, raw):
    response = owner.api.post(URL, data=raw, content_type="application/json")
    assert response.status_code == 400
    assert response.json()["error"]["field"] in {"body", "temperature"}
    assert rows_written() == (0, 0, 0)


def test_a_body_over_the_limit_is_a_413_and_writes_nothing(owner, settings):
    settings.PATHFINDER_MAX_BODY_BYTES = 2048
    response = post(owner.api, {"prompt_token_ids": [1] * 2000})
    assert response.status_code == 413
    assert response.json()["error"]["field"] == "body"
    assert rows_written() == (0, 0, 0)


def test_a_non_json_body_is_a_415(owner):
    response = owner.api.post(URL, data="prompt=1", content_type="text/plain")
    assert response.status_code == 415
    assert response.json()["error"]["field"] == "content-type"


@pytest.mark.parametrize(
    "header", [None, "Bearer pf_not-a-real-key", "Basic dXNlcjpwYXNz", "Bearer "]
)
def test_a_missing_or_wrong_key_is_a_401_and_writes_nothing(client, db, header):
    extra = {"HTTP_AUTHORIZATION": header} if header else {}
    response = post(client, {"prompt_token_ids": [1]}, **extra)
    assert response.status_code == 401
    assert response["WWW-Authenticate"].startswith("Bearer")
    assert response.json()["error"]["field"] == "authorization"
    assert rows_written() == (0, 0, 0)


def test_a_revoked_key_is_refused(owner):
    owner.key.revoked_at = owner.key.created_at
    owner.key.save()
    assert post(owner.api, {"prompt_token_ids": [1]}).status_code == 401


def test_another_matters_job_and_trail_are_404_to_a_key(owner, outsider, run_job):
    job = run_job()
    for path in (f"{URL}/{job.id}", f"{URL}/{job.id}/trail"):
        assert outsider.api.get(path).status_code == 404
        assert owner.api.get(path).status_code == 200

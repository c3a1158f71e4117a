"""API keys' scopes, expiry and revocation, per-key rate limits (counted in Redis), on both APIs."""

import datetime as dt

import pytest
from django.core.management import call_command
from django.utils import timezone
from rest_framework.test import APIClient

from decoding.models import ApiKey, GenerationJob
from decoding.services import api_key_create


def client_for(raw_key: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw_key}")
    return client


def submit(client, **body):
    return client.post("/api/v1/generations", {"prompt_token_ids": [1, 2], **body}, format="json")


def test_an_expired_key_is_refused_with_401_and_submits_nothing(db):
    key, raw = api_key_create(
        matter_name="M", name="old", expires_at=timezone.now() - dt.timedelta(seconds=1)
    )
    response = submit(client_for(raw))
    assert response.status_code == 401
    assert response.json()["error"]["field"] == "authorization"
    # The same answer as for a key that never existed: a caller learns nothing about which.
    unknown = submit(client_for("pf_" + "x" * 40))
    assert response.json()["error"]["message"] == unknown.json()["error"]["message"]
    assert not GenerationJob.objects.exists()
    openai = client_for(raw).get("/v1/models")
    assert openai.status_code == 401
    assert openai.json()["error"]["type"] == "authentication_error"


def test_a_key_revoked_by_the_command_stops_working_at_once(db, capsys):
    key, raw = api_key_create(matter_name="M", name="app")
    client = client_for(raw)
    assert submit(client).status_code == 202
    call_command("revoke_api_key", "--matter", "M", "app")
    assert "Revoked" in capsys.readouterr().out
    response = submit(client)
    assert response.status_code == 401
    assert "revoked" in response.json()["error"]["message"]
    assert GenerationJob.objects.count() == 1
    key.refresh_from_db()
    assert key.revoked_at is not None


def test_a_read_only_key_reads_but_cannot_generate_or_cancel(db, owner):
    job = submit(owner.api).json()
    _, raw = api_key_create(matter_name=owner.key.matter.name, name="reader", scopes=["read"])
    reader = client_for(raw)
    refused = submit(reader)
    assert refused.status_code == 403
    assert "'generate' scope" in refused.json()["error"]["message"]
    assert reader.post(f"/api/v1/generations/{job['id']}/cancel").status_code == 403
    completion = reader.post("/v1/completions", {"prompt": "hi"}, format="json")
    assert completion.status_code == 403
    assert completion.json()["error"]["type"] == "permission_error"
    assert reader.get(f"/api/v1/generations/{job['id']}").status_code == 200
    assert GenerationJob.objects.count() == 1


def test_a_generate_only_key_cannot_read(db):
    _, raw = api_key_create(matter_name="M", name="writer", scopes=["generate"])
    writer = client_for(raw)
    job = submit(writer)
    assert job.status_code == 202
    assert writer.get(f"/api/v1/generations/{job.json()['id']}").status_code == 403


def test_create_api_key_sets_scopes_and_expiry(db, capsys):
    call_command(
        "create_api_key", "--matter", "M", "--scope", "read", "--expires-in-days", "30", "k"
    )
    key = ApiKey.objects.get(name="k")
    assert key.scopes == ["read"]
    assert dt.timedelta(days=29) < key.expires_at - timezone.now() <= dt.timedelta(days=30)


@pytest.fixture
def three_per_minute(settings):
    settings.PATHFINDER_RATE_LIMIT = "3/minute"
    assert settings.CACHES["default"]["BACKEND"].endswith("RedisCache"), "make test sets CACHE_URL"


def test_the_fourth_request_in_a_minute_gets_429_with_retry_after(db, owner, three_per_minute):
    codes = [submit(owner.api).status_code for _ in range(3)]
    assert codes == [202, 202, 202]
    refused = submit(owner.api)
    assert refused.status_code == 429
    assert 0 < int(refused["Retry-After"]) <= 60
    assert refused.json()["error"]["code"] == "throttled"
    assert GenerationJob.objects.count() == 3
    openai = owner.api.get("/v1/models")
    assert openai.status_code == 429 and "Retry-After" in openai
    assert openai.json()["error"]["type"] == "rate_limit_error"


def test_limits_are_per_key(db, owner, outsider, three_per_minute):
    for _ in range(4):
        submit(owner.api)
    assert submit(outsider.api).status_code == 202

"""`make run`'s first-run setup, run twice as a newcomer would (two `make run`s): one API key per
machine, kept under PATHFINDER_VAR_DIR, and an admin who is the local matter's reviewer."""

import io
import re

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from rest_framework.test import APIClient

from decoding.models import ApiKey
from decoding.services import api_key_revoke
from reviewers.models import MatterGrant


@pytest.fixture
def machine(settings, tmp_path, monkeypatch):
    """A fresh machine's var/: its secret key, signing key and local key go there."""
    settings.VAR_DIR = tmp_path
    settings.PATHFINDER_LOCAL_SECRET_KEY_FILE = tmp_path / "secret-key"
    settings.PATHFINDER_CHECKPOINT_KEY_FILE = tmp_path / "checkpoint-signing.key"
    monkeypatch.setenv("PATHFINDER_ADMIN_PASSWORD", "a-newcomers-password")
    return tmp_path


def bootstrap() -> str:
    out = io.StringIO()
    call_command("bootstrap_local", stdout=out)
    return out.getvalue()


def printed_key(output: str) -> str:
    return output.strip().splitlines()[-1]


def works(raw_key: str) -> bool:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw_key}")
    return client.get("/api/v1/generations").status_code == 200


def test_make_run_twice_prints_one_key_and_a_reviewer_login(machine, db):
    first = bootstrap()
    key = printed_key(first)
    assert works(key)
    assert "Admin user: admin  password: a-newcomers-password" in first
    assert re.search(r"Reviewer's desk: /portal/ \(log in as admin; matter 'local'\)", first)
    admin = get_user_model().objects.get(username="admin")
    assert MatterGrant.objects.filter(user=admin, matter__name="local").exists()
    assert (machine / "local-api-key").stat().st_mode & 0o777 == 0o600

    second = bootstrap()
    assert printed_key(second) == key and "(kept in" in second
    assert ApiKey.objects.filter(matter__name="local").count() == 1
    assert "a-newcomers-password" not in second  # printed once, when it was made
    assert "Reviewer's desk" in second


def test_a_revoked_local_key_is_replaced(machine, db):
    key = printed_key(bootstrap())
    api_key_revoke(key=ApiKey.objects.get(key_hash=ApiKey.digest(key)))
    replaced = printed_key(bootstrap())
    assert replaced != key and works(replaced) and not works(key)

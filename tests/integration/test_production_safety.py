"""Safe by default in production: `manage.py check --deploy` clean with production settings and
failing with the development secret; a web process that refuses that secret; logins locked
after ten failures (django-axes)."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

REPO_ROOT = Path(__file__).resolve().parents[2]

PRODUCTION = {
    "PATHFINDER_DEBUG": "false",
    "PATHFINDER_ALLOWED_HOSTS": "pathfinder.example.com",
    "PATHFINDER_SECURE_COOKIES": "true",
    "PATHFINDER_HSTS_SECONDS": "31536000",
    "PATHFINDER_HSTS_INCLUDE_SUBDOMAINS": "true",
    "PATHFINDER_HSTS_PRELOAD": "true",
    "PATHFINDER_SSL_REDIRECT": "true",
    "PATHFINDER_PROXY_SSL_HEADER": "X-Forwarded-Proto",
    "PATHFINDER_CSRF_TRUSTED_ORIGINS": "https://pathfinder.example.com",
}


def run(tmp_path, *argv, **env) -> subprocess.CompletedProcess:
    """A fresh process (settings are read at start) with an empty var/ of its own."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("PATHFINDER_")}
    return subprocess.run(
        [sys.executable, *argv],
        cwd=REPO_ROOT,
        env={**base, "PATHFINDER_VAR_DIR": str(tmp_path / "var"), **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_check_deploy_is_clean_with_production_settings(tmp_path):
    done = run(tmp_path, "manage.py", "check", "--deploy", "--fail-level", "WARNING",
               **PRODUCTION, PATHFINDER_SECRET_KEY=secrets.token_urlsafe(50))  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "no issues" in done.stdout


def test_check_deploy_fails_with_the_development_secret(tmp_path):
    done = run(tmp_path, "manage.py", "check", "--deploy", **PRODUCTION)
    assert done.returncode != 0
    assert "pathfinder.E001" in done.stdout + done.stderr


def test_a_web_process_refuses_the_development_secret_with_debug_off(tmp_path):
    refused = run(tmp_path, "-c", "import pathfinder_site.wsgi")
    assert refused.returncode != 0
    assert "development SECRET_KEY" in refused.stderr and "PATHFINDER_SECRET_KEY" in refused.stderr
    debug = run(tmp_path, "-c", "import pathfinder_site.wsgi", PATHFINDER_DEBUG="true")
    assert debug.returncode == 0, debug.stderr
    (tmp_path / "var").mkdir()
    (tmp_path / "var" / "secret-key").write_text(secrets.token_urlsafe(50))  # bootstrap_local's
    assert run(tmp_path, "-c", "import pathfinder_site.wsgi").returncode == 0


@pytest.mark.parametrize("login_url", ["/accounts/login/", "/admin/login/"])
def test_ten_wrong_passwords_lock_the_account(db, login_url, fast_passwords):
    get_user_model().objects.create_user("rita", password="the right one", is_staff=True)
    client = Client()
    for _ in range(10):
        wrong = client.post(login_url, {"username": "rita", "password": "guess"})
        assert wrong.status_code in (200, 429)  # the form again; the tenth is the lockout
    locked = client.post(login_url, {"username": "rita", "password": "the right one"})
    assert locked.status_code == 429
    assert "_auth_user_id" not in client.session
    other = Client()  # the lock is the account's, from any address
    refused = other.post(
        login_url, {"username": "rita", "password": "the right one"}, REMOTE_ADDR="10.9.8.7"
    )
    assert refused.status_code == 429

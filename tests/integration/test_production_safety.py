"""Safe by default in production: `manage.py check --deploy` clean with production settings and
failing with the development secret; a web process that refuses that secret; logins locked
after ten failures, per username and address (django-axes, reviewers/lockout.py)."""

from __future__ import annotations

import datetime
import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.utils import timezone

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


A, B = "203.0.113.5", "198.51.100.7"  # two clients' addresses


def fail(client, login_url, username, times=10, **meta):
    codes = [
        client.post(login_url, {"username": username, "password": "guess"}, **meta).status_code
        for _ in range(times)
    ]
    assert set(codes) <= {200, 429}, codes  # the form again; the tenth is the lockout
    return codes


def sign_in(login_url, username="rita", **meta) -> int:
    return (
        Client()
        .post(login_url, {"username": username, "password": "the right one"}, **meta)
        .status_code
    )


@pytest.mark.parametrize("login_url", ["/accounts/login/", "/admin/login/"])
def test_ten_wrong_passwords_lock_that_username_from_that_address_only(
    db, login_url, fast_passwords
):
    get_user_model().objects.create_user("rita", password="the right one", is_staff=True)
    fail(Client(), login_url, "rita", REMOTE_ADDR=A)
    assert sign_in(login_url, REMOTE_ADDR=A) == 429  # whatever the password
    assert sign_in(login_url, REMOTE_ADDR=B) == 302  # the owner, from elsewhere, gets in
    get_user_model().objects.create_user("sam", password="the right one", is_staff=True)
    assert sign_in(login_url, "sam", REMOTE_ADDR=A) == 302  # and every other user at A


def test_a_username_that_does_not_exist_behaves_the_same(db, fast_passwords):
    get_user_model().objects.create_user("rita", password="the right one")
    real = fail(Client(), "/accounts/login/", "rita", times=11, REMOTE_ADDR=A)
    ghost = fail(Client(), "/accounts/login/", "nobody-here", times=11, REMOTE_ADDR=A)
    assert real == ghost  # nothing to learn about which usernames exist


def test_behind_a_trusted_proxy_the_forwarded_address_is_the_client(db, settings, fast_passwords):
    settings.PATHFINDER_TRUSTED_PROXIES = ["10.0.0.0/24"]
    get_user_model().objects.create_user("rita", password="the right one")
    proxy = {"REMOTE_ADDR": "10.0.0.2"}
    fail(Client(), "/accounts/login/", "rita", HTTP_X_FORWARDED_FOR=A, **proxy)
    assert sign_in("/accounts/login/", HTTP_X_FORWARDED_FOR=A, **proxy) == 429
    assert sign_in("/accounts/login/", HTTP_X_FORWARDED_FOR=B, **proxy) == 302
    # A client that is not the proxy cannot choose its address by sending the header itself.
    fail(Client(), "/accounts/login/", "rita", REMOTE_ADDR=B, HTTP_X_FORWARDED_FOR=A)
    assert sign_in("/accounts/login/", REMOTE_ADDR=B, HTTP_X_FORWARDED_FOR="192.0.2.9") == 429
    # Nor can it prepend claims in front of what the proxy forwarded.
    spoofed = f"192.0.2.1, {A}"
    assert sign_in("/accounts/login/", HTTP_X_FORWARDED_FOR=spoofed, **proxy) == 429


def test_each_lockout_of_the_same_pair_waits_twice_as_long(db, settings, fast_passwords):
    from axes.models import AccessAttempt

    settings.PATHFINDER_LOGIN_LOCKOUT_MINUTES = 1
    get_user_model().objects.create_user("rita", password="the right one")

    def aged(minutes):  # the lockout's attempts, as if made `minutes` ago
        when = timezone.now() - datetime.timedelta(minutes=minutes)
        AccessAttempt.objects.update(attempt_time=when)

    fail(Client(), "/accounts/login/", "rita", REMOTE_ADDR=A)
    aged(0.5)
    assert sign_in("/accounts/login/", REMOTE_ADDR=A) == 429
    aged(1.5)  # the first lockout lasts a minute
    assert sign_in("/accounts/login/", REMOTE_ADDR=A) == 302
    fail(Client(), "/accounts/login/", "rita", REMOTE_ADDR=A)
    aged(1.5)  # the second, two
    assert sign_in("/accounts/login/", REMOTE_ADDR=A) == 429
    aged(2.5)
    assert sign_in("/accounts/login/", REMOTE_ADDR=A) == 302


def test_the_operator_sees_and_lifts_a_lockout_in_the_admin(db, fast_passwords):
    from axes.models import AccessAttempt

    get_user_model().objects.create_user("rita", password="the right one")
    get_user_model().objects.create_superuser("op", password="operator pass")
    fail(Client(), "/accounts/login/", "rita", REMOTE_ADDR=A)
    operator = Client()
    operator.force_login(get_user_model().objects.get(username="op"))
    listed = operator.get("/admin/axes/accessattempt/")
    assert listed.status_code == 200 and "rita" in listed.content.decode()
    attempt = AccessAttempt.objects.get(username="rita")
    lifted = operator.post(
        f"/admin/axes/accessattempt/{attempt.pk}/delete/", {"post": "yes"}, follow=True
    )
    assert lifted.status_code == 200
    assert sign_in("/accounts/login/", REMOTE_ADDR=A) == 302

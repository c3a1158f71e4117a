"""Issue 40 item 5: `manage.py verifier_key` prints the log's verifier key on stdout and changes
nothing (no checkpoint signed, `/log/checkpoint` unchanged); the portal shows the same key where
it tells a reviewer to verify."""

import io

import pytest
from django.core.management import CommandError, call_command
from django.test import Client

from audit.models import Checkpoint


def test_verifier_key_prints_the_key_and_signs_nothing(signing_host, beat, run_job):
    run_job()
    beat()
    log = Client()
    before = (log.get("/log/checkpoint").content, Checkpoint.objects.count())
    out, err = io.StringIO(), io.StringIO()
    call_command("verifier_key", stdout=out, stderr=err)
    assert out.getvalue() == f"{signing_host.verifier}\n" and err.getvalue() == ""
    assert (log.get("/log/checkpoint").content, Checkpoint.objects.count()) == before


def test_retired_keys_follow_the_current_one(signing_host, settings):
    retired = "pathfinder.local/audit-log+00000000+" + "A" * 43 + "="
    settings.PATHFINDER_CHECKPOINT_VERIFIER_KEY = [signing_host.verifier, retired]
    out = io.StringIO()
    call_command("verifier_key", stdout=out)
    assert out.getvalue().splitlines() == [signing_host.verifier, retired]


def test_without_a_key_it_says_where_one_is_missing(settings, tmp_path):
    settings.PATHFINDER_CHECKPOINT_KEY_FILE = tmp_path / "absent.key"
    settings.PATHFINDER_CHECKPOINT_VERIFIER_KEY = []
    with pytest.raises(CommandError, match="PATHFINDER_CHECKPOINT_VERIFIER_KEY"):
        call_command("verifier_key", stdout=io.StringIO())


def test_the_verify_page_shows_the_key_a_reviewer_pins(signing_host, reviewer):
    page = reviewer.get("/portal/verify")
    assert page.status_code == 200
    assert signing_host.verifier in page.content.decode()


def test_the_verify_page_offers_the_examiners_package_with_its_hash(reviewer):
    from audit import examiner_package

    wheel = examiner_package.wheel()
    page = reviewer.get("/portal/verify").content.decode()
    assert f'href="/examiner/{wheel.filename}"' in page and wheel.sha256 in page

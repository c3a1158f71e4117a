"""The operators' admin: a key's secret shown once, revocation, job retry and cancel, audit
tables strictly read-only and never counted in full."""

import re

import pytest
from django.contrib.auth.models import User
from django.test import Client

from audit.admin import CappedCountPaginator
from audit.models import DecisionRecord
from decoding.models import ApiKey, GenerationJob, Matter


@pytest.fixture
def operator(db):
    client = Client()
    client.force_login(User.objects.create_superuser("olga", email="", password=None))
    return client


def test_an_operator_creates_a_key_whose_secret_is_shown_once_and_works(operator):
    matter = Matter.objects.create(name="Doe v. Roe")
    created = operator.post(
        "/admin/decoding/apikey/add/",
        {"matter": matter.pk, "name": "ingest", "scopes": '["read"]', "expires_at_0": "",
         "expires_at_1": ""},
    )  # fmt: skip
    assert created.status_code == 302
    # The one-time message travels in the server-side session, never in a cookie.
    assert not any("pf_" in morsel.value for morsel in created.cookies.values())
    response = operator.get(created["Location"])
    assert response.status_code == 200
    shown = re.search(r"not shown again: (pf_[\w-]+)", response.content.decode())
    assert shown, response.content.decode()[:2000]
    key = ApiKey.objects.get(name="ingest")
    assert key.key_hash == ApiKey.digest(shown.group(1)) and key.scopes == ["read"]
    assert (
        shown.group(1)
        not in operator.get(f"/admin/decoding/apikey/{key.pk}/change/").content.decode()
    )
    api = Client(HTTP_AUTHORIZATION=f"Bearer {shown.group(1)}")
    assert api.get("/api/v1/generations").status_code == 200

    operator.post("/admin/decoding/apikey/", {"action": "revoke", "_selected_action": [key.pk]})
    assert api.get("/api/v1/generations").status_code == 401


def test_operators_retry_a_failed_job_and_cancel_a_queued_one(operator, owner, run_job, sent_jobs):
    failed = run_job(max_tokens=3)
    GenerationJob.objects.filter(pk=failed.pk).update(status="failed", error="disk full")
    queued = owner.api.post("/api/v1/generations", {"prompt_token_ids": [1]}, format="json")
    queued = GenerationJob.objects.get(pk=queued.json()["id"])
    sent = sent_jobs

    operator.post(
        "/admin/decoding/generationjob/",
        {"action": "retry", "_selected_action": [failed.pk, queued.pk]},
    )
    assert sent == [str(failed.pk)]  # only the failed one is queued again
    assert GenerationJob.objects.get(pk=failed.pk).status == "queued"

    operator.post(
        "/admin/decoding/generationjob/", {"action": "cancel", "_selected_action": [queued.pk]}
    )
    assert GenerationJob.objects.get(pk=queued.pk).status == "cancelled"


def test_audit_tables_are_read_only_in_the_admin(operator, run_job):
    job = run_job(max_tokens=5)
    record = DecisionRecord.objects.filter(trail_id=job.trail_id).first()
    for model in ("trail", "decisionrecord", "ledgerentry", "verificationrun", "checkpoint"):
        assert operator.get(f"/admin/audit/{model}/").status_code == 200
        assert operator.get(f"/admin/audit/{model}/add/").status_code == 403
    page = operator.get(f"/admin/audit/decisionrecord/{record.pk}/change/").content.decode()
    assert 'name="_save"' not in page  # viewable, not editable
    assert operator.post(f"/admin/audit/decisionrecord/{record.pk}/delete/").status_code == 403
    assert DecisionRecord.objects.filter(pk=record.pk).exists()


def test_the_audit_paginator_never_counts_past_its_cap(run_job, monkeypatch):
    run_job(max_tokens=40)
    monkeypatch.setattr(CappedCountPaginator, "CAP", 3)
    paginator = CappedCountPaginator(DecisionRecord.objects.order_by("pk"), 2)
    assert DecisionRecord.objects.count() > 4
    assert paginator.count == 4  # CAP + 1: "more than the cap"

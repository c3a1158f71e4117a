"""The reviewer portal: reviewers see only their matters' trails, walk them step by step with each
decision re-checked on the page, verify, replay, export, annotate and sign off, and every one of
those actions lands in a hash-chained custody log.

The cast: `reviewer` is granted "Doe v. Roe" (the `owner` fixture's matter, where `run_job` runs),
`other_reviewer` is granted "Other v. Matter", `operator` is staff with no grant.
"""

import hashlib
import io
import json
import time
from decimal import Decimal
from html import escape, unescape

import psycopg
import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.db import DatabaseError, connection, transaction
from django.http import HttpRequest
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from audit.evidence import binding
from audit.evidence.offline_verify import verify_bundle
from audit.keys import signing_key
from audit.selectors import trail_clear_decisions
from decoding.models import GenerationJob, Matter
from decoding.services import job_submit
from decoding.worker.execution import job_run
from decoding.worker.replay import replay_run
from reviewers import selectors
from reviewers import urls as reviewer_urls
from reviewers.custody_chain import custody_chain_pending, custody_verify
from reviewers.models import (
    Annotation,
    CustodyEvent,
    CustodyPending,
    CustodyPoint,
    MatterGrant,
    SignOff,
    TrailVerification,
)
from tests.cast import grant

from .conftest import JOB_DEFAULTS

User = get_user_model()
HTMX = {"HTTP_HX_REQUEST": "true"}


@pytest.fixture
def run_other_job(outsider):
    """A finished job of "Other v. Matter"."""

    def run(prompt=(4, 5, 6), **overrides) -> GenerationJob:
        job, _ = job_submit(
            matter=outsider.key.matter,
            api_key=outsider.key,
            model="stub",
            prompt_token_ids=list(prompt),
            enqueue=False,
            **{**JOB_DEFAULTS, **overrides},
        )
        job_run(job_id=job.id)
        job.refresh_from_db()
        return job

    return run


def connection_url() -> str:
    """The test database, for a session of its own (another writer)."""
    db = connection.settings_dict
    return (
        f"postgresql://{db['USER']}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"
    )


def html(response) -> str:
    return response.content.decode()


def records(job) -> list[dict]:
    """The job's decision records (one per step), clear."""
    return trail_clear_decisions(trail_id=job.trail_id)


def rogue(table: str, sql: str, params=None):
    """Raw SQL as a rogue superuser runs it: triggers off first (the test's rollback restores
    them)."""
    with connection.cursor() as cursor:
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
        cursor.execute(f"ALTER TABLE {table} DISABLE TRIGGER ALL")
        cursor.execute(sql, params)


def actions() -> list[str]:
    return list(CustodyEvent.objects.order_by("seq").values_list("action", flat=True))


# --- Access -----------------------------------------------------------------------------------


def test_every_portal_page_asks_for_a_login(run_job, client):
    job = run_job()
    for url in (
        "/portal/",
        f"/portal/jobs/{job.id}/",
        "/portal/custody/",
    ):
        response = client.get(url)
        assert response.status_code == 302
        assert response["Location"].startswith(f"/accounts/login/?next={url}")
    for action in ("verify", "export"):
        response = client.post(f"/portal/jobs/{job.id}/{action}")
        assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")
    assert not TrailVerification.objects.exists()
    assert not CustodyEvent.objects.exists()


def test_a_reviewer_logs_in_with_a_password_and_lands_on_the_trails(owner, fast_passwords):
    user = grant("rita", "Doe v. Roe")
    user.set_password("a long passphrase")
    user.save()
    client = Client()
    page = client.get("/accounts/login/")
    assert page.status_code == 200 and 'name="password"' in html(page)
    refused = client.post("/accounts/login/", {"username": "rita", "password": "wrong"})
    assert refused.status_code == 200 and "did not match" in html(refused)
    response = client.post(
        "/accounts/login/", {"username": "rita", "password": "a long passphrase"}
    )
    assert response.status_code == 302 and response["Location"] == "/portal/"
    assert client.get("/portal/").status_code == 200


def test_the_list_shows_only_the_jobs_of_granted_matters(
    run_job, run_other_job, reviewer, other_reviewer, operator
):
    mine, theirs = run_job(), run_other_job()
    page = html(reviewer.get("/portal/"))
    assert f'<tr data-job-id="{mine.id}">' in page
    assert f'<a class="walk mono" href="/portal/jobs/{mine.id}/" title="job {mine.id}">' in page
    assert str(theirs.id) not in page
    page = html(other_reviewer.get("/portal/"))
    assert f'<tr data-job-id="{theirs.id}">' in page and str(mine.id) not in page
    # Staff manage grants but see no trail without one.
    assert str(mine.id) not in html(operator.get("/portal/"))


def test_another_matters_job_is_not_found_anywhere(run_job, reviewer, other_reviewer):
    job = run_job()
    reviewer.post(f"/portal/jobs/{job.id}/replay")
    replay = job.replays.get()
    events = CustodyEvent.objects.count()
    outside = other_reviewer
    for url in (
        f"/portal/jobs/{job.id}/",
        f"/portal/jobs/{job.id}/step?step=1",
        f"/portal/replays/{replay.id}",
    ):
        assert outside.get(url).status_code == 404, url
    for url in ("verify", "replay", "export", "annotations", "sign-off"):
        response = outside.post(f"/portal/jobs/{job.id}/{url}", {"text": "peek"})
        assert response.status_code == 404, url
    assert outside.get(f"/portal/?matter={job.matter_id}").status_code == 400
    assert CustodyEvent.objects.count() == events
    assert job.replays.count() == 1 and not Annotation.objects.exists()
    assert not TrailVerification.objects.exists()


def test_staff_grant_matters_in_the_admin_where_the_custody_log_is_read_only(operator):
    assert operator.get("/admin/reviewers/mattergrant/add/").status_code == 200
    assert operator.get("/admin/reviewers/custodyevent/").status_code == 200
    assert operator.get("/admin/reviewers/custodyevent/add/").status_code == 403


def test_create_reviewer_creates_and_then_updates_a_reviewer(owner, fast_passwords, monkeypatch):
    out, err = io.StringIO(), io.StringIO()
    monkeypatch.setenv("PATHFINDER_REVIEWER_PASSWORD", "first pass")  # not in `ps`
    call_command(
        "create_reviewer", "rita", "--matter", "Doe v. Roe", "--matter", "New v. Case",
        stdout=out, stderr=err,
    )  # fmt: skip
    assert err.getvalue() == ""
    user = User.objects.get(username="rita")
    assert "Created reviewer 'rita'" in out.getvalue()
    assert user.check_password("first pass")
    assert sorted(user.matter_grants.values_list("matter__name", flat=True)) == [
        "Doe v. Roe",
        "New v. Case",
    ]
    out = io.StringIO()
    call_command(
        "create_reviewer", "rita", "--password", "second pass", "--matter", "Doe v. Roe",
        "--matter", "Third v. Case", stdout=out, stderr=err,
    )  # fmt: skip
    user.refresh_from_db()
    assert "Updated reviewer 'rita'" in out.getvalue()
    assert "--password is visible to other users" in err.getvalue()  # still works, for scripts
    assert user.check_password("second pass") and not user.check_password("first pass")
    assert user.matter_grants.count() == 3
    assert User.objects.filter(username="rita").count() == 1
    assert Matter.objects.filter(name="Doe v. Roe").count() == 1
    client = Client()  # the login backends want the request (django-axes counts failures)
    assert client.login(request=HttpRequest(), username="rita", password="second pass")


# --- The trails list --------------------------------------------------------------------------


def test_the_list_filters_by_matter_date_model_status_verification_and_search(
    run_job, owner, reviewer, beat
):
    plain = run_job(request_id="disc-2024-001")
    other = run_job(prompt=(9, 8), request_id="disc-2024-002")
    beat()
    queued, _ = job_submit(
        matter=owner.key.matter,
        api_key=owner.key,
        model="smollm2-135m-instruct",
        prompt_token_ids=[1, 2],
        request_id="memo-7",
        enqueue=False,
        **JOB_DEFAULTS,
    )
    second_matter = Matter.objects.create(name="Second v. Case")
    MatterGrant.objects.create(user=reviewer.user, matter=second_matter)
    GenerationJob.objects.filter(pk=other.pk).update(matter=second_matter)
    reviewer.post(f"/portal/jobs/{plain.id}/verify")

    def listed(query: str) -> set:
        response = reviewer.get(f"/portal/?{query}")
        assert response.status_code == 200, html(response)
        return {job.id for job in response.context["page"].rows}

    everything = {plain.id, other.id, queued.id}
    assert listed("") == everything
    assert listed(f"matter={second_matter.id}") == {other.id}
    assert listed("status=queued") == {queued.id}
    assert listed("status=succeeded") == {plain.id, other.id}
    assert listed("model=smollm2-135m-instruct") == {queued.id}
    assert listed("model=stub") == {plain.id, other.id}
    assert listed("verified=verified") == {plain.id}
    assert listed("verified=never") == {other.id, queued.id}
    assert listed("verified=broken") == set()
    assert listed(f"q={other.id}") == {other.id}
    assert listed("q=disc-2024") == {plain.id, other.id}
    assert listed("q=memo-7") == {queued.id}
    assert listed("q=2024-001") == set()  # a prefix, not a substring
    today = plain.created_at.date().isoformat()
    assert listed(f"since={today}&until={today}") == everything
    assert listed("until=2000-01-01") == set()
    assert listed("since=2999-01-01") == set()
    bad = reviewer.get("/portal/?since=yesterday")
    assert bad.status_code == 400 and "since:" in html(bad)
    assert reviewer.get("/portal/?verified=maybe").status_code == 400


def test_the_list_shows_the_last_verify_chain_and_marks_a_rewritten_answer(run_job, reviewer, beat):
    kept, rewritten = run_job(prompt=(1, 2)), run_job(prompt=(3, 4))
    beat()

    def badges() -> dict:
        rows = reviewer.get("/portal/").context["page"].rows
        return {row.id: (row.verification_state, row.verification_by, row.unbound) for row in rows}

    assert badges() == {kept.id: ("never", "", False), rewritten.id: ("never", "", False)}
    rogue(
        "decoding_generationjob",
        "UPDATE decoding_generationjob SET output_text = 'The contract is void.' WHERE id = %s",
        [rewritten.id],
    )
    # Marked at once in the list, before anyone verifies: the row no longer matches its trail.
    assert badges()[rewritten.id] == ("never", "", True)
    with pytest.raises(SystemExit):
        call_command("verify_chain", "--all", stdout=io.StringIO(), stderr=io.StringIO())
    assert badges() == {
        kept.id: ("verified", "verify_chain", False),
        rewritten.id: ("broken", "verify_chain", True),
    }
    assert reviewer.get("/portal/?verified=broken").context["page"].rows[0].id == rewritten.id
    assert [r.id for r in reviewer.get("/portal/?verified=verified").context["page"].rows] == [
        kept.id
    ]
    page = html(reviewer.get("/portal/"))
    assert "by verify_chain --all" in page and "differs from its trail" in page
    walk = html(reviewer.get(f"/portal/jobs/{kept.id}/"))
    assert "verify_chain --all</span> found this trail" in walk and "intact" in walk
    # A reviewer's Verify after the run is the newer word.
    reviewer.post(f"/portal/jobs/{kept.id}/verify")
    assert badges()[kept.id] == ("verified", "reviewer", False)


def test_the_list_pages_without_counting(run_job, reviewer, monkeypatch):
    jobs = [run_job(prompt=(n, n + 1)) for n in range(1, 6)]
    monkeypatch.setattr(selectors, "PAGE_SIZE", 2)
    newest_first = [job.id for job in sorted(jobs, key=lambda j: (j.created_at, j.id))][::-1]
    with CaptureQueriesContext(connection) as queries:
        first = reviewer.get("/portal/")
    assert not any("COUNT(" in query["sql"].upper() for query in queries)
    assert [job.id for job in first.context["page"].rows] == newest_first[:2]
    assert 'id="page-next" href="?page=2"' in html(first)
    assert 'id="page-prev"' not in html(first)
    last = reviewer.get("/portal/?page=3")
    assert [job.id for job in last.context["page"].rows] == newest_first[4:]
    assert 'id="page-next"' not in html(last) and 'id="page-prev" href="?page=2"' in html(last)
    assert reviewer.get("/portal/?page=0").status_code == 400


# --- Walking a trail --------------------------------------------------------------------------


def shown_pair(u: float, ratio: float) -> tuple[str, str]:
    """The page's rule: the fewest significant digits (at least 2) that keep u, p/q and 1 in
    the order they really compare."""
    for digits in range(2, 18):
        # significant digits, written without an exponent
        su, sr = (format(Decimal(f"{x:.{digits}g}"), "f") for x in (u, ratio))
        fu, fr = float(su), float(sr)
        truth = (u < ratio, u == ratio, u < 1, ratio < 1, ratio == 1)
        if (fu < fr, fu == fr, fu < 1, fr < 1, fr == 1) == truth:
            return su, sr
    raise AssertionError("no precision keeps the order")


def expected_check(drafted: dict) -> str:
    u, p, q = (float(drafted[key]) for key in ("u", "p", "q"))
    ratio = p / q
    su, sr = shown_pair(u, ratio)
    if u < ratio:
        return f"u = {su} < p/q = {sr} → accepted"
    return f"u = {su} ≥ p/q = {sr} → rejected"


def check_span(text: str) -> str:
    return f'<span class="decision-check">{escape(text)}</span>'


@pytest.mark.parametrize("audit_format", [4, 5], ids=["speculative", "coupled"])
def test_the_walk_shows_each_decision_rechecked_from_the_record(
    run_job, reviewer, monkeypatch, audit_format
):
    """A format-4 trail's sampled decisions are re-checked as u < p/q; a format-5 trail's
    (coupled sampling) as "is it the target's own draw", as greedy's as "is it the argmax"."""
    monkeypatch.setattr(binding, "FORMAT_VERSION", audit_format)
    coupled = audit_format >= 5
    job = run_job(max_tokens=40, temperature=1.0, top_k=8)
    steps = records(job)
    with_rejection = next(
        record for record in steps if 0 < record["accepted_count"] < len(record["drafted"]) - 1
    )
    n = with_rejection["step"]
    response = reviewer.get(f"/portal/jobs/{job.id}/?step={n}")
    assert response.status_code == 200
    page = html(response)
    assert f'<section id="step" data-step="{n}">' in page
    accepted = with_rejection["drafted"][0]
    rejected = with_rejection["drafted"][with_rejection["accepted_count"]]
    correction = with_rejection["correction"]
    assert accepted["accepted"] and not rejected["accepted"]
    if coupled:
        assert check_span(f"target's draw = {accepted['token']} → accepted") in page
        assert check_span(f"target's draw = {correction['token']} → rejected") in page
        assert correction["kind"] == "coupled" and correction["u"] in page
        assert "the target&#x27;s own draw at the first rejected position" in page
    else:
        assert check_span(expected_check(accepted)) in page
        assert check_span(expected_check(rejected)) in page
        assert "→ rejected" in expected_check(rejected)
        assert "&lt;" in escape(expected_check(accepted))
        assert correction["kind"] == "residual" and correction["u"] in page
        assert "norm(max(0, p − q))" in page
    count = with_rejection["accepted_count"]
    tokens = page.split('<span class="drafted-token')[1:]
    assert all('data-accepted="true"' in t for t in tokens[:count])
    assert 'data-accepted="false"' in tokens[count] and "not-reached" not in tokens[count]
    assert all("not-reached" in t for t in tokens[count + 1 : len(with_rejection["drafted"])])
    assert "not reached" in page
    # q(x) and p(x) as bars, with the recorded strings beside them.
    assert f'title="q(x) = {rejected["q"]}"' in page and f'title="p(x) = {rejected["p"]}"' in page
    target = with_rejection["target"]
    assert ("coupled-sampling" if coupled else "speculative-sampling") in page
    assert target["name"] in page and target["sha256"][:12] in page and target["revision"] in page
    assert f"{target['runtime']} {target['runtime_version']}" in page
    assert 'id="prev"' in page and 'id="next"' in page and 'id="jump" name="step"' in page


def test_a_greedy_decision_is_checked_against_the_targets_argmax(run_job, reviewer):
    job = run_job(max_tokens=30, temperature=0.0)
    record = next(r for r in records(job) if 0 < r["accepted_count"] < len(r["drafted"]))
    page = html(reviewer.get(f"/portal/jobs/{job.id}/?step={record['step']}"))
    first = record["drafted"][0]
    assert check_span(f"argmax p = {first['token']} → accepted") in page
    argmax = record["correction"]["token"]
    assert check_span(f"argmax p = {argmax} → rejected") in page
    assert "the target&#x27;s argmax at the first rejected position" in page


def test_every_output_token_links_to_the_step_that_emitted_it(run_job, reviewer):
    job = run_job(max_tokens=25, temperature=1.0)
    page = html(reviewer.get(f"/portal/jobs/{job.id}/"))
    output = page.split('<div id="output"')[1].split("</div>")[0]
    links = output.split('<a class="token')[1:]
    expected = [record["step"] for record in records(job) for _ in record["emitted"]]
    assert len(links) == len(job.output_token_ids) == len(expected)
    for link, step in zip(links, expected, strict=True):
        assert f'data-step="{step}"' in link and f'href="?step={step}"' in link


def test_step_navigation_swaps_the_panel_and_pushes_the_page_url(run_job, reviewer):
    job = run_job(max_tokens=20)
    last = job.steps - 1
    response = reviewer.get(f"/portal/jobs/{job.id}/step?step=1", **HTMX)
    assert response.status_code == 200
    body = html(response)
    assert body.lstrip().startswith('<section id="step" data-step="1">')
    assert "<html" not in body
    assert response["HX-Push-Url"] == f"/portal/jobs/{job.id}/?step=1"
    assert 'id="prev" href="?step=0"' in body and 'id="next" href="?step=2"' in body
    beyond = html(reviewer.get(f"/portal/jobs/{job.id}/?step=999"))
    assert f'data-step="{last}"' in beyond and '<span id="next" class="disabled"' in beyond
    assert '<span id="prev" class="disabled"' in html(reviewer.get(f"/portal/jobs/{job.id}/"))
    bad = reviewer.get(f"/portal/jobs/{job.id}/?step=two")
    assert bad.status_code == 400 and "step:" in html(bad)
    views = CustodyEvent.objects.filter(action="view").order_by("seq")
    assert [json.loads(event.detail)["step"] for event in views] == [1, last, 0]


# --- Verify -----------------------------------------------------------------------------------


def test_verify_checks_the_chain_and_the_signed_inclusion(run_job, run_other_job, reviewer, beat):
    run_other_job()  # another leaf in the log
    job = run_job()
    # Sealed after the newest checkpoint: not verified until beat signs one that covers it.
    pending = reviewer.post(f"/portal/jobs/{job.id}/verify", **HTMX)
    assert "no signed checkpoint covers the trail yet" in html(pending)
    assert not TrailVerification.objects.get().ok
    beat()
    response = reviewer.post(f"/portal/jobs/{job.id}/verify", **HTMX)
    assert response.status_code == 200
    body = html(response).lstrip()
    assert body.startswith('<div id="verification"') and "Verified" in body
    verification = TrailVerification.objects.order_by("-id").first()
    assert verification.ok and verification.first_failure == ""
    assert (verification.job, verification.trail_id) == (job, job.trail_id)
    assert verification.user == reviewer.user and verification.checkpoint_size == 2
    assert "signed checkpoint of 2 trails" in body
    # Without JavaScript: a redirect back to the trail, which shows the verdict.
    response = reviewer.post(f"/portal/jobs/{job.id}/verify")
    assert response.status_code == 302
    assert response["Location"] == f"/portal/jobs/{job.id}/#verification"
    assert "Verified" in html(reviewer.get(response["Location"]))


def test_verify_names_the_first_broken_link_of_a_tampered_trail(run_job, reviewer):
    job = run_job(max_tokens=30)
    rogue(
        "audit_decisionrecord",
        'UPDATE audit_decisionrecord SET payload = replace(payload, \'"workings":"\','
        ' \'"workings":"0\') WHERE trail_id = %s AND seq = 2',
        [job.trail_id],
    )
    response = reviewer.post(f"/portal/jobs/{job.id}/verify", **HTMX)
    body = html(response)
    assert "Broken" in body and "Verified" not in body
    verification = TrailVerification.objects.get()
    assert not verification.ok
    assert verification.first_failure.startswith(f"trail {job.trail_id} seq 2: ")
    assert escape(verification.first_failure) in body
    listed = reviewer.get("/portal/?verified=broken").context["page"].rows
    assert [row.id for row in listed] == [job.id]


# --- Replay -----------------------------------------------------------------------------------


def test_a_replay_polls_until_it_reports_identical(
    run_job, reviewer, django_capture_on_commit_callbacks
):
    job = run_job(max_tokens=30, temperature=1.0, top_k=8)
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        response = reviewer.post(f"/portal/jobs/{job.id}/replay", **HTMX)
    assert len(callbacks) == 1  # the replay is queued for a worker once the request commits
    replay = job.replays.get()
    assert replay.requested_by == reviewer.user
    body = html(response).lstrip()
    assert body.startswith('<div id="replay-result"')
    assert f'hx-get="/portal/replays/{replay.id}"' in body and 'hx-trigger="every 1s"' in body
    replay_run(replay_id=replay.id)  # the worker
    replay.refresh_from_db()
    assert replay.lease_expires_at is not None  # held under a lease while it ran
    poll = html(reviewer.get(f"/portal/replays/{replay.id}", **HTMX))
    assert "hx-trigger" not in poll
    assert f"identical</span> (all {job.steps} steps identical)" in poll
    assert "identical" in html(reviewer.get(f"/portal/replays/{replay.id}"))  # without JS


def test_a_reviewer_has_at_most_the_replays_cap_in_flight(run_job, reviewer, settings):
    settings.PATHFINDER_REVIEWER_MAX_REPLAYS = 2
    job = run_job(max_tokens=5)
    for _ in range(2):  # queued: in a test transaction no worker takes them
        assert reviewer.post(f"/portal/jobs/{job.id}/replay", **HTMX).status_code == 200
    refused = reviewer.post(f"/portal/jobs/{job.id}/replay", **HTMX)
    assert refused.status_code == 429
    assert "PATHFINDER_REVIEWER_MAX_REPLAYS" in html(refused)
    assert job.replays.count() == 2
    job.replays.update(status="done")  # once they are done, another may start
    assert reviewer.post(f"/portal/jobs/{job.id}/replay", **HTMX).status_code == 200


def test_a_diverging_replay_names_the_step_and_field(run_job, reviewer):
    from decoding.worker import runtime

    job = run_job(max_tokens=20, temperature=1.0)
    reviewer.post(f"/portal/jobs/{job.id}/replay", **HTMX)
    replay = job.replays.get()
    from django.conf import settings

    noise = settings.PATHFINDER_STUB_DRAFT_NOISE
    settings.PATHFINDER_STUB_DRAFT_NOISE = 2.0
    runtime._loaded.clear()
    try:
        replay_run(replay_id=replay.id)
    finally:
        settings.PATHFINDER_STUB_DRAFT_NOISE = noise
        runtime._loaded.clear()
    poll = html(reviewer.get(f"/portal/replays/{replay.id}", **HTMX))
    assert "diverged at step 0: field draft (recorded" in poll and "replayed" in poll


def test_a_job_without_a_trail_cannot_be_replayed_or_verified(owner, reviewer):
    queued, _ = job_submit(
        matter=owner.key.matter,
        api_key=owner.key,
        model="stub",
        prompt_token_ids=[1, 2],
        enqueue=False,
        **JOB_DEFAULTS,
    )
    response = reviewer.post(f"/portal/jobs/{queued.id}/replay", **HTMX)
    assert response.status_code == 409 and "only a finished job" in html(response)
    response = reviewer.post(f"/portal/jobs/{queued.id}/verify", **HTMX)
    assert response.status_code == 409 and "no audit trail" in html(response)
    page = reviewer.get(f"/portal/jobs/{queued.id}/")
    assert page.status_code == 200 and "no decision records yet" in html(page)
    assert not CustodyEvent.objects.exclude(action="view").exists()
    # Once it failed, "yet" would be wrong: it says the job ended before its first step.
    GenerationJob.objects.filter(pk=queued.pk).update(status="failed", error="model load failed")
    page = html(reviewer.get(f"/portal/jobs/{queued.id}/"))
    assert "This job failed before its first step was recorded" in page
    assert "no decision records yet" not in page


# --- Export -----------------------------------------------------------------------------------


def test_export_returns_a_bundle_the_offline_verifier_accepts(run_job, reviewer, beat):
    job = run_job(max_tokens=20)
    beat()
    assert reviewer.get(f"/portal/jobs/{job.id}/export").status_code == 405  # a POST only
    response = reviewer.post(f"/portal/jobs/{job.id}/export")
    assert response.status_code == 200
    assert response["Content-Type"] == "application/zip"
    assert f'filename="pathfinder-{job.id}.zip"' in response["Content-Disposition"]
    data = b"".join(response.streaming_content)
    assert verify_bundle(data, keys=[signing_key().verifier]) == []
    event = CustodyEvent.objects.get(action="export")
    detail = json.loads(event.detail)
    assert detail["sha256"] == hashlib.sha256(data).hexdigest() and detail["bytes"] == len(data)


# --- Annotations and sign-off -----------------------------------------------------------------


def test_notes_show_on_their_step_and_on_the_trail(run_job, reviewer):
    job = run_job(max_tokens=20)
    response = reviewer.post(
        f"/portal/jobs/{job.id}/annotations", {"text": "Draft token looks odd", "step": "1"}
    )
    assert response.status_code == 302
    assert response["Location"] == f"/portal/jobs/{job.id}/?step=1#notes"
    reviewer.post(
        f"/portal/jobs/{job.id}/annotations", {"text": "Whole trail reviewed", "step": ""}
    )
    on_step_one = html(reviewer.get(f"/portal/jobs/{job.id}/?step=1"))
    panel = on_step_one.split('<section id="step"')[1].split("</section>")[0]
    assert "Draft token looks odd" in panel and "Whole trail reviewed" not in panel
    trail_notes = on_step_one.split('id="notes"')[1]
    assert "Whole trail reviewed" in trail_notes and "Draft token looks odd" not in trail_notes
    assert '<a href="?step=1"' in trail_notes and "step 1</a> (1)" in trail_notes  # a link
    assert 'form id="annotate"' in on_step_one and 'name="text"' in on_step_one
    on_step_zero = html(reviewer.get(f"/portal/jobs/{job.id}/?step=0"))
    panel = on_step_zero.split('<section id="step"')[1].split("</section>")[0]
    assert "Draft token looks odd" not in panel
    notes = Annotation.objects.order_by("id")
    assert [(note.step, note.user) for note in notes] == [(1, reviewer.user), (None, reviewer.user)]
    empty = reviewer.post(f"/portal/jobs/{job.id}/annotations", {"text": "", "step": "1"})
    assert empty.status_code == 400 and "text:" in html(empty)
    beyond = reviewer.post(f"/portal/jobs/{job.id}/annotations", {"text": "x", "step": "999"})
    assert beyond.status_code == 400 and "step:" in html(beyond)


def test_sign_off_verifies_the_trail_afresh_and_signs_only_an_intact_one(run_job, reviewer, beat):
    job = run_job()
    beat()
    response = reviewer.post(f"/portal/jobs/{job.id}/sign-off", **HTMX)
    assert response.status_code == 200
    sign_off = SignOff.objects.get()
    # The sign-off's own verification, run in its own transaction, not an earlier one.
    assert sign_off.verification == TrailVerification.objects.get()
    assert sign_off.verification.ok and sign_off.verification.checkpoint_size == 1
    body = html(response)
    listed = body.split('<ul id="sign-offs">')[1].split("</ul>")[0]
    assert f"reviewed and verified by rita at {sign_off.at:%Y-%m-%d %H:%M:%S} UTC" in listed
    assert "reviewed and verified by rita" in html(reviewer.get(f"/portal/jobs/{job.id}/"))


def test_sign_off_is_refused_when_the_trail_broke_after_an_ok_verification(run_job, reviewer, beat):
    job = run_job()
    beat()
    reviewer.post(f"/portal/jobs/{job.id}/verify", **HTMX)
    assert TrailVerification.objects.get().ok
    rogue(
        "audit_decisionrecord",
        "UPDATE audit_decisionrecord SET payload = replace(payload, '\"step\":0', '\"step\":9')"
        " WHERE trail_id = %s AND seq = 1",
        [job.trail_id],
    )
    response = reviewer.post(f"/portal/jobs/{job.id}/sign-off")  # without JavaScript
    assert response.status_code == 302
    page = html(reviewer.get(response["Location"]))
    assert "Sign-off refused: verifying the trail found it broken" in page
    assert f"trail {job.trail_id} seq 1" in page
    assert not SignOff.objects.exists()
    assert [v.ok for v in TrailVerification.objects.order_by("id")] == [True, False]


def test_an_edited_output_text_fails_verification_and_is_not_served(run_job, reviewer, owner):
    job = run_job()
    rogue(
        "decoding_generationjob",
        "UPDATE decoding_generationjob SET output_text = 'The contract is void.' WHERE id = %s",
        [job.id],
    )
    reviewer.post(f"/portal/jobs/{job.id}/verify", **HTMX)
    verification = TrailVerification.objects.get()
    assert not verification.ok
    assert "output_text differs from the digest in the answer record" in (
        verification.first_failure
    )
    refused = reviewer.post(f"/portal/jobs/{job.id}/sign-off", **HTMX)
    assert refused.status_code == 409 and not SignOff.objects.exists()
    served = owner.api.get(f"/api/v1/generations/{job.id}")
    assert served.status_code == 500
    assert "not the recorded answer" in served.json()["error"]["message"]


# --- The custody log --------------------------------------------------------------------------


def test_every_reviewer_action_is_chained_in_the_custody_log(run_job, reviewer, beat):
    job = run_job(max_tokens=20)
    beat()
    reviewer.get(f"/portal/jobs/{job.id}/?step=1")
    reviewer.post(f"/portal/jobs/{job.id}/verify", **HTMX)
    reviewer.post(f"/portal/jobs/{job.id}/replay", **HTMX)
    b"".join(reviewer.post(f"/portal/jobs/{job.id}/export").streaming_content)
    reviewer.post(f"/portal/jobs/{job.id}/annotations", {"text": "ok", "step": "0"})
    reviewer.post(f"/portal/jobs/{job.id}/sign-off", **HTMX)
    # A sign-off verifies the trail afresh, and logs that verification first.
    expected = ["view", "verify", "replay", "export", "annotate", "verify", "sign_off"]
    assert actions() == expected
    events = list(CustodyEvent.objects.order_by("seq"))
    assert [event.seq for event in events] == list(range(7))
    assert all(event.user == reviewer.user for event in events)
    assert all((event.job_id, event.trail_id) == (job.id, job.trail_id) for event in events)
    payload = json.loads(events[1].payload)
    assert payload["action"] == "verify" and payload["user"] == {
        "id": reviewer.user.pk,
        "username": "rita",
    }
    assert payload["detail"]["ok"] is True and payload["job"] == str(job.id)
    # The format of reviewers.custody, recomputed with nothing but SHA-256.
    prev = hashlib.sha256(b"PF-CUSTODY-GENESIS-v1").hexdigest()
    for event in events:
        message = b"\0".join(
            [b"PF-CUSTODY-v1", str(event.seq).encode(), prev.encode(), event.payload.encode()]
        )
        assert event.prev_hash == prev
        assert event.event_hash == hashlib.sha256(message).hexdigest()
        prev = event.event_hash
    report, since = custody_verify()
    assert report.ok and report.events_checked == 7 and since is None
    page = html(reviewer.get("/portal/custody/"))
    assert page.count('<tr class="custody-event"') == 7 and "chain intact" in page
    assert "verified through seq 6 by an earlier check" in page  # only what is new is walked


def test_the_custody_log_says_each_event_in_a_sentence(run_job, reviewer, operator, beat):
    """As a reviewer reads it: who did what to which trail or matter, with the recorded detail
    one click away (issue 45 item 6)."""
    job = run_job(max_tokens=20)
    beat()
    reviewer.get(f"/portal/jobs/{job.id}/?step=1")
    reviewer.post(f"/portal/jobs/{job.id}/verify", **HTMX)
    b"".join(reviewer.post(f"/portal/jobs/{job.id}/export").streaming_content)
    reviewer.post(f"/portal/jobs/{job.id}/annotations", {"text": "Matches exhibit 4", "step": "0"})
    call_command("legal_hold", "Doe v. Roe", "--on", "--reason", "Preservation order of 3 May",
                 "--by", "rita", stdout=io.StringIO())  # fmt: skip
    page = unescape(html(operator.get("/portal/custody/")))
    said = [
        "rita viewed step 1 of the trail.",
        "rita verified the trail: intact,",
        f"rita downloaded the trail's bundle pathfinder-{job.id}",
        "rita annotated step 0: “Matches exhibit 4”.",
        "rita (through ",
        "placed a legal hold on matter “Doe v. Roe”: “Preservation order of 3 May”.",
    ]
    missing = [words for words in said if words not in page]
    assert not missing, missing
    assert page.count("<summary>as recorded</summary>") == 5


def test_every_portal_write_leaves_a_custody_event(run_job, owner, reviewer, beat):
    """Every URL of the portal that takes a POST, found from its URL patterns (a new one must
    be listed here with a body), appends at least one event to the custody log."""
    job = run_job(max_tokens=12)
    batch = _finished_batch(owner)
    beat()
    ids = {"job_id": job.id, "replay_id": job.id, "batch_id": batch.pk}
    bodies = {
        "verify": {},
        "replay_start": {},
        "export": {},
        "receipt": {},
        "annotate": {"text": "Checked against the exhibit.", "step": "0"},
        "sign_off": {},
        "matter_export": {"export-matter": job.matter_id},
        "batch_export": {},
    }
    writes = {}
    for pattern in reviewer_urls.urlpatterns:
        kwargs = {name: ids[name] for name in pattern.pattern.converters}
        url = reverse(f"reviewers:{pattern.name}", kwargs=kwargs)
        if reviewer.get(url).status_code == 405:  # a view that only takes a POST
            writes[pattern.name] = url
    assert set(writes) == set(bodies), "a portal write without a custody test"
    for name, url in writes.items():
        before = CustodyEvent.objects.count()
        response = reviewer.post(url, bodies[name], **HTMX)
        if hasattr(response, "streaming_content"):
            b"".join(response.streaming_content)
        assert response.status_code < 400, (name, response.status_code)
        assert CustodyEvent.objects.count() > before, f"{name} left no custody event"
    assert custody_verify()[0].ok


def _finished_batch(owner):
    """A one-line batch of the owner's matter, decoded as a worker would."""
    from decoding import batches

    line = {"custom_id": "a", "method": "POST", "url": "/v1/completions",
            "body": {"model": "stub", "prompt": [1, 2, 3], "max_tokens": 4}}  # fmt: skip
    stored = batches.file_upload(matter=owner.key.matter, api_key=owner.key, filename="a.jsonl",
                                 content=[json.dumps(line).encode()], purpose="batch")  # fmt: skip
    batch = batches.batch_create(matter=owner.key.matter, api_key=owner.key,
                                 input_file_id=stored.pk, endpoint="/v1/completions",
                                 completion_window="24h")  # fmt: skip
    batches.batches_advance()
    job = GenerationJob.objects.get(batch_line__batch=batch)
    job_run(job_id=job.pk)
    batches.job_ended(job.pk)
    return batch


def test_a_view_never_waits_for_the_custody_chain_and_is_chained_after(run_job, reviewer):
    """Another writer holds the chain (an advisory lock in a session of its own): the page is
    served at once, its view waits as pending, and the next turn at the chain takes it."""
    job = run_job()
    key = int.from_bytes(b"PFCUSTDY", "big") & 0x7FFF_FFFF_FFFF_FFFF
    with psycopg.connect(connection_url(), autocommit=True) as holder:
        holder.execute("SELECT pg_advisory_lock(%s)", [key])
        started = time.monotonic()
        assert reviewer.get(f"/portal/jobs/{job.id}/").status_code == 200
        assert time.monotonic() - started < 2
        assert CustodyPending.objects.count() == 1 and not CustodyEvent.objects.exists()
        assert custody_chain_pending() == 0  # still held: nobody waits
        holder.execute("SELECT pg_advisory_unlock(%s)", [key])
    assert custody_chain_pending() == 1
    (event,) = CustodyEvent.objects.all()
    assert (event.action, event.job_id, event.detail) == ("view", job.id, '{"step":0}')
    assert not CustodyPending.objects.exists() and custody_verify()[0].ok


def test_a_verified_point_is_checked_before_it_is_used(run_job, reviewer):
    job = run_job()
    for step in range(3):
        reviewer.get(f"/portal/jobs/{job.id}/?step={step}")
    assert custody_verify()[0].ok  # leaves a point at seq 2
    reviewer.get(f"/portal/jobs/{job.id}/?step=0")
    report, since = custody_verify()
    assert report.ok and (since, report.events_checked) == (2, 1)

    CustodyPoint.objects.create(seq=3, event_hash="0" * 64, mac="0" * 64)  # not ours
    report, since = custody_verify()
    assert since is None and [str(f) for f in report.failures] == [
        "custody event seq 3: the verified point at seq 3 does not check (its MAC)"
    ]
    assert report.events_checked == 4  # walked from the start instead
    rogue(
        "reviewers_custodyevent",
        "UPDATE reviewers_custodyevent SET payload = replace(payload, 'view', 'vieW')"
        " WHERE seq = 3",
    )
    page = html(reviewer.get("/portal/custody/"))
    assert "chain broken" in page


def test_a_rogue_edit_of_a_custody_event_is_named_by_its_seq(run_job, reviewer):
    job = run_job()
    for step in range(4):
        reviewer.get(f"/portal/jobs/{job.id}/?step={step}")
    with pytest.raises(DatabaseError), transaction.atomic():
        CustodyEvent.objects.filter(seq=1).update(detail='{"step":9}')  # the trigger refuses
    rogue(
        "reviewers_custodyevent",
        "UPDATE reviewers_custodyevent SET detail = '{\"step\":9}' WHERE seq = 2",
    )
    report, _ = custody_verify()
    assert not report.ok
    assert str(report.first_failure) == (
        "custody event seq 2: the stored detail differs from the hashed payload"
    )
    rogue(
        "reviewers_custodyevent",
        "UPDATE reviewers_custodyevent SET payload = replace(payload, 'view', 'vieW')"
        " WHERE seq = 1",
    )
    assert [failure.seq for failure in custody_verify()[0].failures][:2] == [1, 1]
    page = html(reviewer.get("/portal/custody/"))
    assert "chain broken" in page and "custody event seq 1:" in page


def test_the_custody_log_shows_reviewers_their_matters_and_staff_everything(
    run_job, run_other_job, reviewer, other_reviewer, operator
):
    mine, theirs = run_job(), run_other_job()
    reviewer.get(f"/portal/jobs/{mine.id}/")
    other_reviewer.get(f"/portal/jobs/{theirs.id}/")
    other_reviewer.get(f"/portal/jobs/{theirs.id}/?step=1")
    assert html(reviewer.get("/portal/custody/")).count('<tr class="custody-event"') == 1
    assert html(other_reviewer.get("/portal/custody/")).count('<tr class="custody-event"') == 2
    everything = html(operator.get("/portal/custody/"))
    assert everything.count('<tr class="custody-event"') == 3
    assert str(mine.id) in everything and str(theirs.id) in everything


def test_the_walk_shows_a_structured_output_jobs_schema_beside_the_answer(run_job, reviewer):
    job = run_job()
    schema = {"type": "object", "properties": {"parties": {"type": "array"}}}
    stored = {"type": "json_schema", "json_schema": {"name": "clause", "schema": schema}}
    GenerationJob.objects.filter(pk=job.pk).update(response_format=json.dumps(stored))
    page = html(reviewer.get(f"/portal/jobs/{job.id}/"))
    assert "JSON Schema “clause”" in page
    assert escape(json.dumps(schema, indent=2)) in page
    GenerationJob.objects.filter(pk=job.pk).update(response_format="")
    assert 'id="structured-output"' not in html(reviewer.get(f"/portal/jobs/{job.id}/"))

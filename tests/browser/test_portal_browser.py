"""The reviewer portal in a real browser: headless Chromium against gunicorn and a Celery worker.

Tests share one stack (see conftest.py) and run in file order. Each uses its own job where its
actions leave a mark: the tampering test breaks the chain of a job no other test verifies, and
the sign-off test signs a job of its own.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest
from playwright.sync_api import Locator, Page, expect
from psycopg import sql

from tests.system.helpers import REPO_ROOT

from .helpers import Portal, Reviewer

pytestmark = [pytest.mark.browser, pytest.mark.timeout(180)]

SUBMIT = "button[type=submit], input[type=submit]"
FILTERS = ("q", "matter", "status", "model", "verified", "since", "until")
# "u = 0.31 < p/q = 0.84 → accepted" (or "≥ ... → rejected")
# Speculative sampling's accept test (audit formats 2 to 4) or coupled sampling's "is it the
# target's own draw" (format 5, the walked job's).
DECISION_CHECK = re.compile(
    r"(u = \d+(\.\d+)?\s*\S+\s*p/q = \d+(\.\d+)?|target's draw = \d+)\s*→\s*(accepted|rejected)"
)


def log_in(page: Page, reviewer: Reviewer) -> None:
    page.goto("/accounts/login/")
    page.fill("#id_username", reviewer.username)
    page.fill("#id_password", reviewer.password)
    page.locator(SUBMIT).first.click()
    expect(page).to_have_url(re.compile(r"/portal/$"))


def job_rows(page: Page) -> list[str]:
    """The job ids of the rows the trails list shows."""
    return page.locator("tr[data-job-id]").evaluate_all(
        "rows => rows.map(row => row.dataset.jobId)"
    )


def walk_url(job: dict, step: int | None = None) -> str:
    return f"/portal/jobs/{job['id']}/" + ("" if step is None else f"?step={step}")


def current_step(page: Page) -> int:
    return int(page.locator("section#step").get_attribute("data-step"))


def expect_step(page: Page, step: int) -> None:
    expect(page.locator("section#step")).to_have_attribute("data-step", str(step))


def verify(page: Page) -> Locator:
    """Click verify and wait for this verification's answer (an earlier one may be on show)."""
    with page.expect_response(lambda response: response.url.endswith("/verify")) as answer:
        page.locator("button#verify").click()
    assert answer.value.ok, answer.value.status
    return page.locator("div#verification")


def test_a_reviewer_logs_in_and_lands_on_the_trails_list_of_her_matter(
    page: Page, portal: Portal, screenshot_dir
):
    page.goto("/portal/")
    expect(page).to_have_url(re.compile(r"/accounts/login/"))  # anonymous: sent to log in
    expect(page.locator("#id_username")).to_be_visible()
    expect(page.locator("#id_password")).to_be_visible()
    page.screenshot(path=str(screenshot_dir / "login.png"), full_page=True)

    log_in(page, portal.alice)

    expect(page.locator("tr[data-job-id]").first).to_be_visible()
    alices = {portal.jobs[name]["id"] for name in ("walked", "tampered", "signed", "answered")}
    assert set(job_rows(page)) == alices
    for name in FILTERS:
        expect(page.locator(f"[name={name}]")).to_have_count(1)
    assert_fits_the_window(page)
    page.screenshot(path=str(screenshot_dir / "trails.png"), full_page=True)


def test_searching_a_request_id_finds_its_trail_and_links_to_its_walk(page: Page, portal: Portal):
    job = portal.jobs["walked"]
    log_in(page, portal.alice)

    page.fill("input[name=q]", job["request_id"])
    page.press("input[name=q]", "Enter")
    expect(page).to_have_url(re.compile(r"[?&]q=req-1\b"))
    expect(page.locator("tr[data-job-id]")).to_have_count(1)
    assert job_rows(page) == [job["id"]]

    page.fill("input[name=q]", job["id"])  # a job id finds it too
    page.press("input[name=q]", "Enter")
    expect(page).to_have_url(re.compile(rf"[?&]q={job['id']}"))
    expect(page.locator("tr[data-job-id]")).to_have_count(1)
    assert job_rows(page) == [job["id"]]

    page.locator(f'tr[data-job-id="{job["id"]}"] a.walk').click()
    expect(page).to_have_url(re.compile(rf"/portal/jobs/{job['id']}/"))
    expect(page.locator("section#step")).to_be_visible()


def test_the_keyboard_walks_the_steps_of_a_trail(page: Page, portal: Portal, screenshot_dir):
    job = portal.jobs["walked"]
    assert job["steps"] >= 5, job  # room to step forward twice and jump to step 3
    log_in(page, portal.alice)
    page.goto(walk_url(job))
    first = current_step(page)

    page.keyboard.press("ArrowRight")
    expect_step(page, first + 1)
    page.keyboard.press("n")
    expect_step(page, first + 2)
    page.keyboard.press("p")
    expect_step(page, first + 1)
    page.keyboard.press("ArrowLeft")
    expect_step(page, first)

    page.keyboard.press("g")
    expect(page.locator("input#jump")).to_be_focused()
    page.keyboard.type("3")
    page.keyboard.press("Enter")
    expect_step(page, 3)

    page.locator("#next").click()
    expect_step(page, 4)
    page.locator("#prev").click()
    expect_step(page, 3)

    # The step shows each drafted token's fate and the test that decided it.
    drafted = page.locator("span.drafted-token")
    expect(drafted.first).to_be_visible()
    verdicts = drafted.evaluate_all("spans => spans.map(span => span.dataset.accepted)")
    assert verdicts and set(verdicts) <= {"true", "false"}, verdicts
    checks = page.locator("span.decision-check").all_inner_texts()
    assert checks, "no span.decision-check on the step"
    for check in checks:
        assert DECISION_CHECK.search(check), check

    # Every output token links to the step that produced it.
    tokens = page.locator("div#output a.token[data-step]")
    expect(tokens).to_have_count(len(job["output_token_ids"]))
    last = tokens.last
    last_step = int(last.get_attribute("data-step"))
    last.click()
    expect_step(page, last_step)
    page.goto(walk_url(job, 3))
    expect_step(page, 3)
    page.screenshot(path=str(screenshot_dir / "walk.png"), full_page=True)


def test_verifying_an_intact_trail_shows_the_verified_badge(
    page: Page, portal: Portal, screenshot_dir
):
    log_in(page, portal.alice)
    page.goto(walk_url(portal.jobs["walked"]))
    verification = verify(page)
    expect(verification).to_contain_text("Verified")
    expect(verification).not_to_contain_text("Broken")
    verification.scroll_into_view_if_needed()
    page.screenshot(path=str(screenshot_dir / "verified.png"), full_page=True)


def test_replaying_a_trail_on_a_worker_reproduces_it_identically(page: Page, portal: Portal):
    log_in(page, portal.alice)
    page.goto(walk_url(portal.jobs["walked"]))
    page.locator("button#replay").click()
    result = page.locator("div#replay-result")
    expect(result).to_contain_text("identical", timeout=60_000)
    text = result.inner_text().lower()
    assert "not identical" not in text and "diverge" not in text, text


def test_exporting_downloads_a_bundle_the_offline_verifier_accepts(
    page: Page, portal: Portal, tmp_path
):
    job = portal.jobs["walked"]
    log_in(page, portal.alice)
    page.goto(walk_url(job))
    with page.expect_download() as download_info:
        page.locator("button#export").click()
    download = download_info.value
    assert download.suggested_filename == f"pathfinder-{job['id']}.zip"
    bundle = tmp_path / download.suggested_filename
    download.save_as(bundle)

    # Unpinned, the verifier checks everything but will not say VERIFIED.
    checked = offline_verify(bundle)
    assert checked.returncode == 3 and "NOT VERIFIED" in checked.stdout, describe_run(checked)
    # Pinned to the stack's own checkpoint key, as an auditor who has it out of band would.
    key_file = portal.stack.env["PATHFINDER_CHECKPOINT_KEY_FILE"]
    verifier_key = Path(key_file).read_text(encoding="ascii").split()[1]
    pinned = offline_verify(bundle, "--key", verifier_key)
    assert pinned.returncode == 0, describe_run(pinned)


def test_annotating_and_signing_off_a_trail(page: Page, portal: Portal):
    note = "Steps 0-3 checked against the drafter's log."
    log_in(page, portal.alice)
    page.goto(walk_url(portal.jobs["signed"]))
    # A sign-off rests on a verification that passed.
    expect(verify(page)).to_contain_text("Verified")

    form = page.locator("form#annotate")
    form.locator("textarea[name=text]").fill(note)
    form.locator(SUBMIT).first.click()
    expect(page.get_by_text(note)).to_be_visible()

    # Signing off asks first: dismissed, nothing is signed; accepted, the sign-off is recorded.
    asked = []
    page.once("dialog", lambda dialog: (asked.append(dialog.message), dialog.dismiss()))
    page.locator("button#sign-off").click()
    expect(page.locator("ul#sign-offs")).to_contain_text("No sign-offs yet.")
    assert asked and "cannot be withdrawn" in asked[0], asked
    page.once("dialog", lambda dialog: dialog.accept())
    page.locator("button#sign-off").click()
    expect(page.locator("ul#sign-offs")).to_contain_text("reviewed and verified by alice at")


def test_a_tampered_trail_fails_verification_naming_the_record(page: Page, portal: Portal):
    trail_id = portal.jobs["tampered"]["trail"]["id"]
    assert portal.jobs["tampered"]["trail"]["records"] >= 4, "seq 2 must sit mid-trail"
    tamper_as_superuser(portal.stack.database_url, trail_id)

    log_in(page, portal.alice)
    page.goto(walk_url(portal.jobs["tampered"]))
    verification = verify(page)
    expect(verification).to_contain_text("Broken")
    expect(verification).to_contain_text(f"trail {trail_id} seq 2:")
    expect(verification).not_to_contain_text("Verified")


def test_a_reviewer_of_another_matter_sees_none_of_alices_jobs(page: Page, portal: Portal):
    alices = [portal.jobs[name] for name in ("walked", "tampered", "signed")]
    log_in(page, portal.bob)
    expect(page.locator("tr[data-job-id]").first).to_be_visible()
    assert job_rows(page) == [portal.jobs["other"]["id"]]

    page.fill("input[name=q]", alices[0]["request_id"])
    page.press("input[name=q]", "Enter")
    expect(page).to_have_url(re.compile(r"[?&]q="))
    expect(page.locator("tr[data-job-id]")).to_have_count(0)

    for job in alices:
        response = page.goto(walk_url(job))
        assert response is not None and response.status == 404, (job["id"], response)


def test_another_matters_job_is_a_404_for_alice_too(page: Page, portal: Portal):
    log_in(page, portal.alice)
    response = page.goto(walk_url(portal.jobs["other"]))
    assert response is not None and response.status == 404, response


def test_the_custody_log_lists_what_reviewers_did(page: Page, portal: Portal, screenshot_dir):
    log_in(page, portal.alice)
    page.goto(walk_url(portal.jobs["walked"]))
    expect(verify(page)).to_contain_text("Verified")

    page.goto("/portal/custody/")
    events = page.locator("tr.custody-event")
    expect(events.first).to_be_visible()
    expect(events.filter(has_text=portal.jobs["walked"]["id"]).first).to_be_visible()
    expect(events.filter(has_text="alice viewed").first).to_be_visible()  # in a sentence
    assert_fits_the_window(page)
    page.screenshot(path=str(screenshot_dir / "custody.png"), full_page=True)


# --- helpers --------------------------------------------------------------------------------------


def assert_fits_the_window(page: Page) -> None:
    """The page needs no sideways scrolling in the tests' 1280-pixel window."""
    wide = page.evaluate("document.documentElement.scrollWidth")
    assert wide <= page.viewport_size["width"], f"{page.url} is {wide} px wide"


def offline_verify(bundle, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "audit.offline_verify", str(bundle), *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


def describe_run(completed: subprocess.CompletedProcess) -> str:
    return f"exit {completed.returncode}\n{completed.stdout}\n{completed.stderr}"


TRIGGER_STATES = sql.SQL(
    "SELECT tgname, tgenabled FROM pg_trigger "
    "WHERE tgrelid = 'audit_decisionrecord'::regclass AND NOT tgisinternal ORDER BY tgname"
)


def tamper_as_superuser(database_url: str, trail_id: str) -> None:
    """Rewrite record seq 2 (step 1's decision) the way a rogue superuser could: switch the
    append-only triggers off, edit the payload, switch them back on exactly as they were, all
    in one transaction."""
    with psycopg.connect(database_url) as conn, conn.transaction():
        conn.execute("SET CONSTRAINTS ALL IMMEDIATE")
        before = conn.execute(TRIGGER_STATES).fetchall()
        conn.execute("ALTER TABLE audit_decisionrecord DISABLE TRIGGER ALL")
        changed = conn.execute(
            "UPDATE audit_decisionrecord SET payload = replace(payload, '\"step\":1,', "
            "'\"step\":7,') WHERE trail_id = %s AND seq = 2 RETURNING payload",
            (trail_id,),
        ).fetchall()
        assert len(changed) == 1 and '"step":7,' in changed[0][0], changed
        conn.execute("ALTER TABLE audit_decisionrecord ENABLE TRIGGER ALL")
        # ENABLE ALWAYS takes one trigger name, not ALL; restore each ALWAYS trigger by name.
        for name, state in before:
            if state == "A":
                conn.execute(
                    sql.SQL("ALTER TABLE audit_decisionrecord ENABLE ALWAYS TRIGGER {}").format(
                        sql.Identifier(name)
                    )
                )
        assert conn.execute(TRIGGER_STATES).fetchall() == before

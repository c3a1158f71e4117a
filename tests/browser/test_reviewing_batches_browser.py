"""The desk's batches in a real browser: a reviewer sees a batch sent through /v1/batches with its
progress and counts, opens it, follows a line to its trail, sees a refused line's reason, and
produces the batch as one matter bundle that audit.offline_verify accepts. Another matter's
reviewer sees none of it.

Runs after test_portal_browser.py (file order), so the batch's jobs change no count the earlier
tests read.
"""

from __future__ import annotations

import io
import json
import time
import zipfile

import pytest
import requests
from playwright.sync_api import Page, expect

from audit.evidence.bundle_format import MATTER
from tests.system.helpers import auth, describe

from .helpers import Portal
from .test_desk_browser import stack_key, verify_in_the_page
from .test_portal_browser import assert_fits_the_window, describe_run, log_in, offline_verify

pytestmark = [pytest.mark.browser, pytest.mark.timeout(240)]


def line(custom_id: str, **body) -> str:
    body = {"model": "stub", "prompt": [5, 6, 7], "max_tokens": 8, "temperature": 0, **body}
    return json.dumps(
        {"custom_id": custom_id, "method": "POST", "url": "/v1/completions", "body": body}
    )


@pytest.fixture(scope="module")
def batch(portal: Portal) -> dict:
    """A finished three-line batch of alice's matter (one line refused), under a checkpoint."""
    stack = portal.stack
    text = "\n".join([line("memo-1"), line("memo-2", top_p=9), line("memo-3")]) + "\n"
    uploaded = requests.post(stack.url("/v1/files"), headers=auth(stack.api_key), timeout=30,
                             files={"file": ("memos.jsonl", io.BytesIO(text.encode()))},
                             data={"purpose": "batch"})  # fmt: skip
    assert uploaded.status_code == 200, uploaded.text
    request = {"input_file_id": uploaded.json()["id"], "endpoint": "/v1/completions",
               "completion_window": "24h"}  # fmt: skip
    created = requests.post(
        stack.url("/v1/batches"), headers=auth(stack.api_key), timeout=30, json=request
    )
    assert created.status_code == 200, created.text
    deadline = time.monotonic() + 120
    found = created.json()
    while found["status"] != "completed":
        assert time.monotonic() < deadline, found
        time.sleep(0.5)
        found = requests.get(stack.url(f"/v1/batches/{found['id']}"),
                             headers=auth(stack.api_key), timeout=30).json()  # fmt: skip
    signed = stack.manage("checkpoint")
    assert signed.returncode == 0, describe(signed)
    return found


def test_a_reviewer_follows_a_batch_to_each_lines_trail(
    page: Page, portal: Portal, batch, screenshot_dir
):
    log_in(page, portal.alice)
    page.get_by_role("link", name="Batches").click()
    row = page.locator(f'tr[data-batch-id="{batch["id"]}"]')
    expect(row).to_contain_text("completed")
    expect(row.locator("progress")).to_have_attribute("value", "3")
    expect(row.locator("progress")).to_have_attribute("max", "3")
    expect(row).to_contain_text("2 answered")
    expect(row).to_contain_text("1 refused")
    row.locator("a.open-batch").click()
    expect(page.locator("#batch-status")).to_have_text("completed")
    refused = page.locator('tr[data-line="2"]')
    expect(refused).to_contain_text("memo-2")
    expect(refused).to_contain_text("refused (400)")
    expect(refused.locator("td.refusal")).to_contain_text("top_p")
    expect(refused.locator("td.question")).to_have_text("—")  # a refused line never ran
    first = page.locator('tr[data-line="1"]')
    expect(first.locator("td.question")).to_have_text("(token ids)")  # the stub reads no text
    job_id = first.locator("a.walk").get_attribute("title")
    assert_fits_the_window(page)
    page.screenshot(path=str(screenshot_dir / "batch.png"), full_page=True)
    first.locator("a.walk").click()
    expect(page).to_have_url(f"{portal.base_url}/portal/jobs/{job_id}/")
    expect(page.locator("#output a.token").first).to_be_visible()


def test_a_reviewer_produces_the_batch_as_one_bundle_that_verifies(
    page: Page, portal: Portal, batch, tmp_path, screenshot_dir
):
    log_in(page, portal.alice)
    page.goto(f"/portal/batches/{batch['id']}/")
    with page.expect_download() as download:
        page.locator("#export-batch").click()
    bundle = tmp_path / "batch.zip"
    download.value.save_as(bundle)
    checked = offline_verify(bundle, "--key", stack_key(portal))
    assert checked.returncode == 0, describe_run(checked)
    with zipfile.ZipFile(bundle) as archive:
        doc = json.loads(archive.read(MATTER))
    assert len(doc["trails"]) == 2  # the two answered lines; the refused one never ran
    outside = {entry["reason"] for entry in doc["left_out"]}
    assert outside == {"outside_selection"} and doc["batch"] == batch["id"]
    # Both verifiers name each trail by the line the caller labelled, not only by its UUID.
    for number, custom_id in ((1, "memo-1"), (3, "memo-3")):
        assert f'custom_id "{custom_id}", line {number} of batch {batch["id"]}' in checked.stdout
    verify_in_the_page(page, portal, bundle)
    expect(page.locator("#verdict")).to_contain_text("Verified in this browser")
    chains = page.locator('li[data-check$=": records and chain"]')
    expect(chains).to_have_count(2)
    expect(chains.filter(has_text='custom_id "memo-1", line 1 of batch')).to_have_count(1)
    expect(chains.filter(has_text='custom_id "memo-3", line 3 of batch')).to_have_count(1)
    page.screenshot(path=str(screenshot_dir / "verify-batch.png"), full_page=True)


def test_another_matters_reviewer_sees_no_batch_of_this_one(page: Page, portal: Portal, batch):
    log_in(page, portal.bob)
    page.get_by_role("link", name="Batches").click()
    expect(page.locator(f'tr[data-batch-id="{batch["id"]}"]')).to_have_count(0)
    response = page.request.get(f"{portal.base_url}/portal/batches/{batch['id']}/")
    assert response.status == 404

"""The reviewer's desk in a real browser: finding a trail by what was asked, seeing how each token
was produced, producing a matter, reading its report, and verifying bundles in the page itself
with verify.js, which must agree with audit.evidence.offline_verify on every bundle, intact or
tampered.

Runs before test_portal_browser.py (file order), whose tampering test breaks a trail of the
matter exported here.
"""

from __future__ import annotations

import base64
import io
import json
import re
import subprocess
import zipfile
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from audit.evidence import sealing
from audit.evidence.bundle_format import deterministic_zip, manifest_member, matter_member_names
from audit.evidence.decision_rule import DecisionRule
from audit.evidence.offline_verify import check_bundle
from tests.system.helpers import REPO_ROOT
from tests.unit.engine.test_decision_recheck import (
    APERIODIC,
    KINDS,
    LIES,
    failures,
    honest_trail,
)

from .helpers import Portal
from .test_portal_browser import describe_run, job_rows, log_in, offline_verify, walk_url

pytestmark = [pytest.mark.browser, pytest.mark.timeout(240)]

DATA = REPO_ROOT / "tests" / "data"
GOLDEN_KEYS = json.loads((DATA / "audit_golden_vectors_v2.json").read_text("utf-8"))["keys"]


def stack_key(portal: Portal) -> str:
    key_file = portal.stack.env["PATHFINDER_CHECKPOINT_KEY_FILE"]
    return Path(key_file).read_text(encoding="ascii").split()[1]


def test_searching_words_of_the_question_finds_the_trail(page: Page, portal: Portal):
    job = portal.jobs["answered"]
    log_in(page, portal.alice)
    row = page.locator(f'tr[data-job-id="{job["id"]}"]')
    expect(row.locator("td.question")).to_contain_text("Quote the first sentence")
    expect(row.locator("td.answer")).to_contain_text(job["output_text"].split()[0])

    page.fill("input[name=q]", "hearing adjourned")
    page.press("input[name=q]", "Enter")
    expect(page).to_have_url(re.compile(r"[?&]q=hearing\+adjourned"))
    expect(page.locator("tr[data-job-id]")).to_have_count(1)
    assert job_rows(page) == [job["id"]]
    page.fill("input[name=q]", "photosynthesis")  # asked and answered nowhere
    page.press("input[name=q]", "Enter")
    expect(page.get_by_text("No trails match.")).to_be_visible()


def test_every_token_shows_how_it_was_produced(page: Page, portal: Portal, screenshot_dir):
    job = portal.jobs["answered"]
    log_in(page, portal.alice)
    page.goto(walk_url(job))
    tokens = page.locator("#output a.token")
    expect(tokens.first).to_be_visible()
    sources = set(tokens.evaluate_all("links => links.map(a => a.dataset.source)"))
    assert sources <= {"draft", "correction", "bonus", "target"} and sources, sources
    expect(page.locator("ul.legend li")).to_have_count(4)
    # The keyboard reaches a token, and its probabilities are read out, not only hovered.
    tokens.first.focus()
    label = tokens.first.get_attribute("aria-label")
    assert re.search(r"step \d+, p \d", label), label
    expect(page.locator("#chart-steps svg[role=img]")).to_be_visible()
    expect(page.locator("#prompt-text")).to_contain_text("<|im_start|>user")
    page.screenshot(path=str(screenshot_dir / "provenance.png"), full_page=True)
    # A trail whose drafts were tested at several positions charts acceptance by position too.
    page.goto(walk_url(portal.jobs["walked"]))
    bars = page.locator("#chart-positions svg[role=img] rect.value")
    expect(bars.first).to_be_attached()
    titles = bars.evaluate_all("rects => rects.map(r => r.textContent)")
    assert titles[0].startswith("position 1:"), titles


def download_matter(page: Page, portal: Portal, tmp_path) -> Path:
    log_in(page, portal.alice)
    page.locator("details#produce summary").click()
    with page.expect_download() as download_info:
        page.locator("button#export-matter").click()
    download = download_info.value
    assert download.suggested_filename.startswith("pathfinder-matter-doe-v-roe")
    path = tmp_path / download.suggested_filename
    download.save_as(path)
    return path


def test_a_produced_matter_verifies_offline_and_reads_as_a_report(
    page: Page, portal: Portal, tmp_path, screenshot_dir
):
    bundle = download_matter(page, portal, tmp_path)
    pinned = offline_verify(bundle, "--key", stack_key(portal))
    assert pinned.returncode == 0, describe_run(pinned)
    assert "MATTER 'Doe v. Roe'" in pinned.stdout
    # Complete against the service's public log, read over HTTP as an examiner reads it.
    complete = offline_verify(bundle, "--key", stack_key(portal), "--log", f"{portal.base_url}/log")
    assert complete.returncode == 0, describe_run(complete)
    assert "OK    completeness: the log's" in complete.stdout
    with zipfile.ZipFile(bundle) as archive:
        matter = json.loads(archive.read("matter.json"))
        (tmp_path / "report.pdf").write_bytes(archive.read("report.pdf"))
    alices = {portal.jobs[name]["id"] for name in ("walked", "tampered", "signed", "answered")}
    assert {t["job_id"] for t in matter["trails"]} == alices
    text = subprocess.run(
        ["pdftotext", "-layout", str(tmp_path / "report.pdf"), "-"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    answer = portal.jobs["answered"]["output_text"]
    assert " ".join(answer.split()) in " ".join(text.split())
    assert "902(13)" in text
    # The answered trail's page as a picture, for the README (and for a person to look at).
    pdf = str(tmp_path / "report.pdf")
    pages = int(re.search(r"Pages:\s+(\d+)", run(["pdfinfo", pdf])).group(1))
    first_words = " ".join(answer.split()[:3])
    page_number = next(
        n
        for n in range(1, pages + 1)
        if first_words in run(["pdftotext", "-f", str(n), "-l", str(n), pdf, "-"])
    )
    run(
        [
            "pdftoppm",
            "-png",
            "-r",
            "70",
            "-f",
            str(page_number),
            "-l",
            str(page_number),
            "-singlefile",
            pdf,
            str(tmp_path / "answered"),
        ]
    )
    (screenshot_dir / "report.png").write_bytes((tmp_path / "answered.png").read_bytes())


def run(args: list[str]) -> str:
    return subprocess.run(args, capture_output=True, text=True, check=True).stdout


def in_page(page: Page, data: bytes, log_keys: list[str], witness_keys=()) -> dict:
    return page.evaluate(
        """async ([b64, logKeys, witnessKeys]) => {
            const bytes = Uint8Array.from(atob(b64), c => c.charCodeAt(0));
            return await window.PathfinderVerify.verify(bytes, {logKeys, witnessKeys});
        }""",
        [base64.b64encode(data).decode(), log_keys, list(witness_keys)],
    )


def members_of(data: bytes) -> dict[str, bytes]:
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        return {info.filename: archive.read(info) for info in archive.infolist()}


def repacked(data: bytes, change) -> bytes:
    """A competent edit: `change` applied to the members, the manifest recomputed."""
    members = members_of(data)
    change(members)
    members.pop("manifest.json")
    if "matter.json" in members:
        ids = [t["trail_id"] for t in json.loads(members["matter.json"])["trails"]]
        names = [n for n in matter_member_names(ids) if n in members]
        members = {n: members[n] for n in names + [n for n in members if n not in names]}
    ordered = list(members.items())
    return deterministic_zip(ordered + [("manifest.json", manifest_member(ordered))])


def tampered_copies(data: bytes) -> dict[str, bytes]:
    """The same bundle edited in each way a forger might try (written before the verifier)."""
    answer_name = next(n for n in members_of(data) if n.endswith("answer.txt"))
    prefix = answer_name[: -len("answer.txt")]  # "" in a one-trail bundle, else trails/<id>/

    def answer(m):
        m[answer_name] = m[answer_name] + b" (amended)"

    def record(m):
        lines = m[prefix + "records.jsonl"].split(b"\n")
        lines[1] = lines[1].replace(b'"step":0', b'"step":9')
        m[prefix + "records.jsonl"] = b"\n".join(lines)

    def proof(m):
        name = prefix + "inclusion-proof.json"
        doc = json.loads(m[name])
        doc["leaf_index"] += 1
        m[name] = (json.dumps(doc, sort_keys=True, indent=2) + "\n").encode()

    def checkpoint(m):
        lines = m["checkpoint.txt"].decode().split("\n")
        lines[1] = str(int(lines[1]) + 1)
        m["checkpoint.txt"] = "\n".join(lines).encode()

    def declared_left_out(m):
        if "matter.json" not in m:  # a one-trail bundle has no list to lie in
            return
        doc = json.loads(m["matter.json"])
        held = doc["trails"][0]
        doc["left_out"] = [
            {"job_id": held["job_id"], "reason": "still open", "trail_id": held["trail_id"]}
        ]
        m["matter.json"] = json_form(doc)

    def another_matter_key(m):  # a key that tags none of the bundle's leaves
        doc = json.loads(m.get("matter.json", b"{}"))
        if "matter_key" in doc:
            m["matter.json"] = json_form({**doc, "matter_key": "6d" * 32})

    def no_cosignature(m):
        lines = m["checkpoint.txt"].decode().split("\n")
        m["checkpoint.txt"] = "\n".join(lines[:5] + [""]).encode()  # body, blank, log's line

    def params(m):
        doc = json.loads(m[prefix + "params.json"])
        m[prefix + "params.json"] = json_form({**doc, "system_prompt": "Answer in French."})

    def models(m):
        doc = json.loads(m[prefix + "models.json"])
        m[prefix + "models.json"] = json_form({**doc, "target": {**doc["target"], "name": "x"}})

    def garbage_timestamp(m):
        m["checkpoint.tsr"] = b"\x30\x03\x02\x01\x02"  # a SEQUENCE, but status "rejection"

    def readme(m):
        m["README.txt"] = b"Certified by Jane Roe, custodian.\n" + m["README.txt"]

    def verification(m):
        m["verification.txt"] += b"- a judge reviewed every trail\n"

    flipped = bytearray(data)
    flipped[len(flipped) // 2] ^= 0x01
    return {
        "answer edited": repacked(data, answer),
        "record edited": repacked(data, record),
        "proof of another leaf": repacked(data, proof),
        "checkpoint size edited": repacked(data, checkpoint),
        "witness cosignature stripped": repacked(data, no_cosignature),
        "one byte flipped": bytes(flipped),
        "params.json rewritten": repacked(data, params),
        "models.json rewritten": repacked(data, models),
        "checkpoint.tsr garbage": repacked(data, garbage_timestamp),
        "README.txt rewritten": repacked(data, readme),
        "a held trail declared left out": repacked(data, declared_left_out),
        "another matter's key": repacked(data, another_matter_key),
        "verification.txt rewritten": repacked(data, verification),
    }


def dropped_trail(data: bytes) -> bytes:
    """A matter bundle without one of its single-attempt trails (listing and members), its
    README.txt, verification.txt and report.pdf made again: a forger who knows the format."""
    from audit.evidence import descriptive

    def drop(m):
        doc = json.loads(m["matter.json"])
        jobs = [t["job_id"] for t in doc["trails"]]
        gone = next(t["trail_id"] for t in doc["trails"] if jobs.count(t["job_id"]) == 1)
        doc["trails"] = [t for t in doc["trails"] if t["trail_id"] != gone]
        m["matter.json"] = json_form(doc)
        for name in [n for n in m if n.startswith(f"trails/{gone}/")]:
            del m[name]
        m.update(descriptive.matter_descriptive(m))

    return repacked(data, drop)


def json_form(value) -> bytes:
    return (json.dumps(value, sort_keys=True, indent=2, ensure_ascii=False) + "\n").encode()


def agree(page: Page, data: bytes, log_keys: list[str], witness_keys=()) -> tuple[bool, dict]:
    checks = check_bundle(data, keys=log_keys, witness_keys=list(witness_keys))
    # offline_verify says VERIFIED (exit 0) only when every check passed under a pinned key.
    python_ok = all(c.ok for c in checks) and bool(log_keys)
    js = in_page(page, data, log_keys, witness_keys)
    assert js["ok"] == python_ok, (
        [c.name for c in checks if not c.ok],
        [(c["name"], c["failures"]) for c in js["checks"] if not c["ok"]],
    )
    if not python_ok and log_keys:  # and they name a common failing check
        python_failed = {c.name for c in checks if not c.ok}
        js_failed = {c["name"] for c in js["checks"] if not c["ok"]}
        assert js_failed, js
        assert python_failed & js_failed or "zip container" in python_failed, (
            python_failed,
            js_failed,
        )
    return python_ok, js


def test_the_page_verifier_agrees_with_offline_verify_on_every_bundle(
    page: Page, portal: Portal, tmp_path
):
    golden_log, golden_witness = GOLDEN_KEYS["log_verifier"], GOLDEN_KEYS["witness_verifier"]
    matter = download_matter(page, portal, tmp_path).read_bytes()
    page.goto(walk_url(portal.jobs["walked"]))
    with page.expect_download() as download_info:
        page.locator("button#export").click()
    trail = Path(download_info.value.path()).read_bytes()
    page.goto("/portal/verify")
    expect(page.locator("form#verify-form")).to_be_visible()
    real_key = stack_key(portal)

    bundles = {
        "golden trail": (
            (DATA / "sample-bundle.zip").read_bytes(),
            [golden_log],
            [golden_witness],
        ),
        "golden trail in audit format 3, the prompt withheld": (
            (DATA / "sample-bundle-v3.zip").read_bytes(),
            [json.loads((DATA / "audit_golden_vectors_v3.json").read_text())["log_verifier"]],
            [],
        ),
        "golden trail in audit format 4, the prompt withheld": (
            (DATA / "sample-bundle-v4.zip").read_bytes(),
            [json.loads((DATA / "audit_golden_vectors_v4.json").read_text())["log_verifier"]],
            [],
        ),
        "golden matter": (
            (DATA / "sample-matter.zip").read_bytes(),
            [golden_log],
            [golden_witness],
        ),
        "golden matter of matter format 1": (
            (DATA / "legacy" / "sample-matter-matter-format1.zip").read_bytes(),
            [golden_log],
            [golden_witness],
        ),
        "real trail export (format 4)": (trail, [real_key], []),
        "real matter export": (matter, [real_key], []),
    }
    for name, (data, logs, witnesses) in bundles.items():
        ok, js = agree(page, data, logs, witnesses)
        assert ok, (name, js)
        assert not agree(page, data, [], witnesses)[0], name  # unpinned is never "verified"
        for edit, copy in tampered_copies(data).items():
            if edit == "witness cosignature stripped" and not witnesses:
                continue  # this stack has no witness to strip
            if copy == data:
                continue  # an edit of a member this kind of bundle lacks
            ok, js = agree(page, copy, logs, witnesses)
            assert not ok, (name, edit)
    # A key that is not the log's.
    assert not agree(page, trail, [golden_log])[0]
    # Bundles of the formats before 4 prove no descriptive member: both verifiers refuse them.
    for legacy in ("sample-bundle-format2.zip", "sample-matter-format3.zip"):
        data = (DATA / "legacy" / legacy).read_bytes()
        assert not agree(page, data, [golden_log], [golden_witness])[0], legacy


def test_the_page_leaves_report_pdf_to_offline_verify_and_says_so(page: Page, portal: Portal):
    """The one member the page cannot make again (ReportLab lays it out): a rewritten report
    fails offline_verify; the page's verdict names report.pdf as unproven rather than passing it
    silently. A known gap, stated in docs/audit-format.md."""
    log_in(page, portal.alice)
    page.goto("/portal/verify")
    expect(page.locator("form#verify-form")).to_be_visible()
    golden_log, golden_witness = GOLDEN_KEYS["log_verifier"], GOLDEN_KEYS["witness_verifier"]

    def report(m):
        m["report.pdf"] = m["report.pdf"].replace(b"/Author (Pathfinder)", b"/Author (Someone)")

    forged = repacked((DATA / "sample-matter.zip").read_bytes(), report)
    assert {c.name for c in check_bundle(forged, keys=[golden_log]) if not c.ok} == {
        "descriptive files"
    }
    js = in_page(page, forged, [golden_log], [golden_witness])
    # The golden matter is of another log than this page's: its completeness is left too.
    assert js["ok"] and js["unproven"] == ["report.pdf", "completeness against the log (--log)"]


def crafted_copies(data: bytes) -> dict[str, bytes]:
    """Bundles built to break a parser rather than to pass (issue 22; written before the fix)."""
    prefix = next(n for n in members_of(data) if n.endswith("answer.txt"))[: -len("answer.txt")]

    def not_utf8(m):
        m[prefix + "records.jsonl"] = b"\xff" + m[prefix + "records.jsonl"]

    def salt_not_hex(m):
        doc = json.loads(m[prefix + "disclosures.json"])
        doc[sorted(doc)[0]]["salt"] = "zz-not-hex"
        m[prefix + "disclosures.json"] = (json.dumps(doc, sort_keys=True, indent=2) + "\n").encode()

    def null_row(m):
        doc = json.loads(m[prefix + "chain.json"])
        doc["records"][0] = None
        m[prefix + "chain.json"] = (json.dumps(doc, sort_keys=True, indent=2) + "\n").encode()

    return {
        "records.jsonl not UTF-8": repacked(data, not_utf8),
        "a salt that is not hex": repacked(data, salt_not_hex),
        "a null chain row": repacked(data, null_row),
        "20,000 entries naming one member": one_member_many_times(data, 20_000),
    }


def one_member_many_times(data: bytes, count: int) -> bytes:
    """A central directory whose every entry points at the first member's local header."""
    eocd = data.rindex(b"PK\x05\x06")
    directory = int.from_bytes(data[eocd + 16 : eocd + 20], "little")
    name_len, extra_len, comment_len = (
        int.from_bytes(data[directory + at : directory + at + 2], "little") for at in (28, 30, 32)
    )
    entry = data[directory : directory + 46 + name_len + extra_len + comment_len]
    central = entry * count
    end = (
        data[eocd : eocd + 8]
        + count.to_bytes(2, "little") * 2
        + len(central).to_bytes(4, "little")
        + directory.to_bytes(4, "little")
        + b"\x00\x00"
    )
    return data[:directory] + central + end


def test_the_page_verifier_fails_crafted_bundles_and_never_hangs(
    page: Page, portal: Portal, tmp_path
):
    log_in(page, portal.alice)
    page.goto("/portal/verify")
    expect(page.locator("form#verify-form")).to_be_visible()
    real = (DATA / "sample-matter.zip").read_bytes()
    for name, copy in crafted_copies(real).items():
        ok, js = agree(page, copy, [GOLDEN_KEYS["log_verifier"]], [GOLDEN_KEYS["witness_verifier"]])
        assert not ok, name
        assert any(not c["ok"] for c in js["checks"]), (name, js)
    # Through the form, as a reviewer uploads it: the verdict comes (from the page's Web
    # Worker), never an endless "Checking".
    for copy in crafted_copies(real).values():
        upload = tmp_path / "crafted.zip"
        upload.write_bytes(copy)
        page.fill("#log-keys", GOLDEN_KEYS["log_verifier"])
        page.set_input_files("#bundle-file", str(upload))
        page.locator("button#verify-bundle").click()
        expect(page.locator("#verdict")).to_contain_text("NOT verified", timeout=30_000)
        page.reload()


def crafted_openings(data: bytes) -> dict[str, bytes]:
    """Format-3 openings built to break a parser or to pass a guess (written before the page's
    format-3 code ran on them): each must fail both verifiers, the page with a verdict."""

    def opened(change):
        def edit(m):
            doc = json.loads(m["disclosures.json"])
            change(doc)
            text = json.dumps(doc, sort_keys=True, indent=2) + "\n"
            # Too deep for json.dumps: spelled out in place of its placeholder.
            m["disclosures.json"] = text.replace('"DEEP"', "[" * 5_000 + "]" * 5_000).encode()

        return repacked(data, edit)

    def deep(doc):
        doc["step.0.drafted.1"] = {"salt": "00" * 32, "value": "DEEP"}

    return {
        "an opening that is a string": opened(lambda d: d.update({"step.0.correction": "41"})),
        "an opening whose value is null": opened(
            lambda d: d["step.0.correction"].update({"value": None})
        ),
        "an opening of a slot no decision has": opened(
            lambda d: d.update({"step.7.correction": d["step.0.correction"]})
        ),
        "an opening nested 5,000 deep": opened(deep),
        "20,000 openings of slots that do not exist": opened(
            lambda d: d.update(
                {
                    f"step.{i}.drafted.0": {"salt": "00" * 32, "value": {"token": i}}
                    for i in range(2, 20_002)
                }  # fmt: skip
            )
        ),
        "a guessed opening of the sealed draft": opened(
            lambda d: d.update(
                {"step.0.drafted.1": {"salt": "00" * 32, "value": {"token": 1729, "text": " void"}}}
            )
        ),
    }


def test_the_page_verifier_fails_crafted_format_3_openings_as_offline_verify_does(
    page: Page, portal: Portal
):
    log_in(page, portal.alice)
    page.goto("/portal/verify")
    expect(page.locator("form#verify-form")).to_be_visible()
    sample = (DATA / "sample-bundle-v3.zip").read_bytes()
    key = json.loads((DATA / "audit_golden_vectors_v3.json").read_text())["log_verifier"]
    assert agree(page, sample, [key])[0]
    for name, copy in crafted_openings(sample).items():
        ok, js = agree(page, copy, [key])
        assert not ok, name
        assert any(not c["ok"] for c in js["checks"]), (name, js)


def crafted_workings(data: bytes) -> dict[str, bytes]:
    """Format-4 openings of a bundle that opens none (the prompt withheld), written before the
    page's format-4 code ran on them: a guess of the sealed workings, the right value under a
    wrong salt, a value of another slot's form, workings of a step that does not exist."""
    vectors = json.loads((DATA / "audit_golden_vectors_v4.json").read_text())
    slot = vectors["slots"]["step.0.workings"]

    def opened(entries: dict):
        def edit(m):
            doc = {**json.loads(m["disclosures.json"]), **entries}
            m["disclosures.json"] = (json.dumps(doc, sort_keys=True, indent=2) + "\n").encode()

        return repacked(data, edit)

    guess = {**slot["value"], "accepted_count": 2}
    return {
        "a guessed opening of the sealed workings": opened(
            {"step.0.workings": {"salt": slot["slot_salt"], "value": guess}}
        ),
        "the workings under another slot's salt": opened(
            {"step.0.workings": {"salt": "00" * 32, "value": slot["value"]}}
        ),
        "workings opened as a token": opened(
            {"step.0.workings": {"salt": slot["slot_salt"], "value": {"token": 40}}}
        ),
        "workings of a step no decision has": opened(
            {"step.9.workings": {"salt": slot["slot_salt"], "value": slot["value"]}}
        ),
    }


def test_the_page_verifier_fails_crafted_format_4_openings_as_offline_verify_does(
    page: Page, portal: Portal
):
    log_in(page, portal.alice)
    page.goto("/portal/verify")
    expect(page.locator("form#verify-form")).to_be_visible()
    sample = (DATA / "sample-bundle-v4.zip").read_bytes()
    key = json.loads((DATA / "audit_golden_vectors_v4.json").read_text())["log_verifier"]
    ok, js = agree(page, sample, [key])
    assert ok
    rule = next(c for c in js["checks"] if c["name"] == "decision rule")
    assert "none of the 2 decisions re-checked" in rule["detail"], rule
    for name, copy in crafted_workings(sample).items():
        ok, js = agree(page, copy, [key])
        assert not ok, name
        assert any(not c["ok"] for c in js["checks"]), (name, js)


def verify_in_the_page(page: Page, portal: Portal, bundle: Path) -> None:
    """A reviewer pins the stack's log key on the Verify page and checks `bundle` there."""
    page.goto("/portal/verify")
    page.fill("#log-keys", stack_key(portal))
    page.locator("#log-keys").dispatch_event("change")
    page.set_input_files("#bundle-file", str(bundle))
    page.locator("button#verify-bundle").click()


def test_a_reviewer_verifies_a_download_in_the_page(
    page: Page, portal: Portal, tmp_path, screenshot_dir
):
    bundle = download_matter(page, portal, tmp_path)
    verify_in_the_page(page, portal, bundle)
    expect(page.locator("#verdict")).to_contain_text("Verified in this browser")
    expect(page.locator('li[data-check="completeness"]')).to_have_attribute("data-ok", "true")
    page.screenshot(path=str(screenshot_dir / "verify.png"), full_page=True)

    # A trail dropped whole, its descriptive members made again: only the log shows it.
    dropped = tmp_path / "dropped.zip"
    dropped.write_bytes(dropped_trail(bundle.read_bytes()))
    assert all(c.ok for c in check_bundle(dropped.read_bytes(), keys=[stack_key(portal)]))
    page.reload()
    page.set_input_files("#bundle-file", str(dropped))
    page.locator("button#verify-bundle").click()
    expect(page.locator("#verdict")).to_contain_text("NOT verified")
    expect(page.locator('li[data-check="completeness"]')).to_contain_text(
        "neither in the bundle nor listed as left out"
    )

    tampered = tmp_path / "tampered.zip"
    tampered.write_bytes(tampered_copies(bundle.read_bytes())["answer edited"])
    page.reload()  # the pinned key stays with this browser
    expect(page.locator("#log-keys")).to_have_value(stack_key(portal))
    page.set_input_files("#bundle-file", str(tampered))
    page.locator("button#verify-bundle").click()
    expect(page.locator("#verdict")).to_contain_text("NOT verified")
    expect(page.locator('li[data-ok="false"]').first).to_contain_text("question and answer")


def in_page_rule(page: Page, request: dict, decisions: list[dict], prompt_ids=None) -> list:
    return page.evaluate(
        "([r, d, ids]) => window.PathfinderDecisionRule.failures(r, d, ids)",
        [request, decisions, prompt_ids],
    )


def test_the_page_re_checks_every_decision_as_offline_verify_does(page: Page, portal: Portal):
    """decision-rule.js against audit.evidence.decision_rule, on the engine's own records and each
    lie."""
    log_in(page, portal.alice)
    page.goto("/portal/verify")
    expect(page.locator("form#verify-form")).to_be_visible()
    for drafter, temperature in KINDS:
        for max_tokens, eos in ((24, None), (5, None), (40, 3)):
            request, decisions = honest_trail(drafter, temperature, max_tokens, eos)
            assert in_page_rule(page, request, decisions) == [], (drafter, temperature)
    request, decisions = honest_trail("model", 1.0)
    for lie, edit in LIES.items():
        lied = json.loads(json.dumps(decisions))
        edit(lied)
        python, js = failures(request, lied), in_page_rule(page, request, lied)
        assert python and js, (lie, python, js)
        assert len(js) == len(python), (lie, python, js)
    # With the prompt's token ids disclosed, both read copied drafts back from the context.
    request, decisions = honest_trail("lookup", 1.0, prompt=APERIODIC)
    ids = list(APERIODIC)
    assert in_page_rule(page, request, decisions, ids) == []
    lied = json.loads(json.dumps(decisions))
    copied = next(x for x in lied if x["draft_source"] and x["draft_source"]["offset"] > 1)
    copied["draft_source"]["offset"] -= 1  # another place of the context, in bounds
    rule = DecisionRule(request, prompt_ids=ids)
    python = [r for x in lied for r in rule.check(x)]
    assert python and len(in_page_rule(page, request, lied, ids)) == len(python)
    # Format 3 with nothing opened (both texts withheld): the numbers alone, and the same lies.
    request, decisions = honest_trail("model", 1.0)
    sealed = [sealing.open_decision(sealing.seal_decision(d, "ab" * 32)[0], {}) for d in decisions]
    assert in_page_rule(page, request, sealed) == [] and failures(request, sealed) == []
    for lie, edit in LIES.items():
        lied = json.loads(json.dumps(decisions))
        edit(lied)
        try:
            lied = [sealing.open_decision(sealing.seal_decision(d, "ab" * 32)[0], {}) for d in lied]
        except (KeyError, TypeError, IndexError):
            continue  # a lie about the tokens' shape: not a format-3 record at all
        python, js = failures(request, lied), in_page_rule(page, request, lied)
        assert len(js) == len(python), (lie, python, js)
    # Python's repr of a float, which the records use, for the numbers that trip formatters.
    for x in (1.0, 0.1, 1e-05, 0.0001, 1e16, 1.5e-07, 123456789.125, 2.5e-323, 0.30000000000000004):
        assert page.evaluate("x => window.PathfinderDecisionRule.numberText(x)", x) == repr(x)

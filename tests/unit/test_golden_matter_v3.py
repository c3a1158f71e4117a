"""The golden matter bundle of matter format 3 (tests/data/sample-matter-v3.zip) and its log
(tests/data/sample-log-v3/): reproduced byte for byte by tests/data/make_golden_matter_v3.py,
complete against its log with a left-out trail for every reason but sealed_after_checkpoint, and
each of the examiner's attacks on completeness, made on it, refused by both verifiers
(offline_verify, and verify.js under Node on the same files)."""

import io
import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from audit.evidence import bundle_format, descriptive
from audit.evidence.offline_verify import check_bundle, main, verify_bundle
from tests.data import make_golden_matter_v3 as golden

DATA = Path(__file__).parents[1] / "data"
SAMPLE = (DATA / "sample-matter-v3.zip").read_bytes()
LOG = str(DATA / "sample-log-v3")
KEY = json.loads((DATA / "audit_golden_vectors_v2.json").read_text("utf-8"))["keys"]["log_verifier"]
NODE = shutil.which("node")
REPO = Path(__file__).parents[2]


def test_the_code_reproduces_the_committed_sample_and_log():
    assert golden.build() == SAMPLE
    for path, body in golden.log_files().items():
        assert (DATA / "sample-log-v3" / path).read_bytes() == body


def test_it_verifies_complete_and_says_what_it_selected(capsys):
    assert verify_bundle(SAMPLE, keys=[KEY], log=LOG) == []
    checks = {c.name: c for c in check_bundle(SAMPLE, keys=[KEY], log=LOG)}
    assert "and the 3 left out are so for the reason" in checks["completeness"].detail
    assert main([str(DATA / "sample-matter-v3.zip"), "--key", KEY, "--log", LOG]) == 0
    printed = capsys.readouterr().out
    selection = 'SELECTION every trail of matter "Golden v. Vectors" from 2026-01-01 to 2026-01-31'
    assert selection in printed


def forged(change) -> bytes:
    """The sample with matter.json changed, its descriptive members made again (a forger who
    knows the format and this code) and its manifest redone."""
    with zipfile.ZipFile(io.BytesIO(SAMPLE)) as archive:
        members = {i.filename: archive.read(i) for i in archive.infolist()}
    doc = json.loads(members["matter.json"])
    change(doc)
    members["matter.json"] = bundle_format.json_member(doc)
    members.update(descriptive.matter_descriptive(members))
    body = [(n, d) for n, d in members.items() if n != "manifest.json"]
    return bundle_format.deterministic_zip(
        [*body, ("manifest.json", bundle_format.manifest_member(body))]
    )


def reason(trail: str, code: str):
    def change(doc):
        for entry in doc["left_out"]:
            if entry["trail_id"] == trail:
                entry["reason"] = code

    return change


def downgrade(to: int):
    def change(doc):
        doc["format_version"] = to
        del doc["batch"]
        if to == 1:
            del doc["matter_key"]
        for entry in doc["left_out"]:
            entry["reason"] = "outside the selection: its job was submitted on another day"

    return change


def dropped_and_hidden(doc):  # the one trail called outside a selection narrowed past it
    doc["since"] = "2026-01-02"


ATTACKS = {
    # a false reason: the log seals the trail, or seals it with a tag
    "no-request trail called open": (reason(golden._trail(1), "open"), "leaf 1, under the"),
    "outside trail called open": (reason(golden._trail(3), "open"), "leaf 3, under the"),
    "outside trail called no_request": (
        reason(golden._trail(3), "no_request"),
        "does not carry the null matter tag",
    ),
    "open trail called outside": (
        reason(golden.OPEN_TRAIL, "outside_selection"),
        "no leaf under the checkpoint seals it",
    ),
    "a reason no verifier can check": (
        reason(golden._trail(3), "privileged"),
        "no reason a verifier can check",
    ),
    # the selection unbound: narrowed, or a batch named
    "since narrowed past the listed trail": (dropped_and_hidden, "it is not of the selection"),
    "a batch named": (
        lambda doc: doc.update(batch="batch_0123456789abcdef0123456789abcdef"),
        "it is not of the selection",
    ),
    # a downgrade below the leaves' format
    "downgraded to matter format 2": (downgrade(2), "so a bundle of it is matter format 3"),
    "downgraded to matter format 1": (downgrade(1), "carries"),
}


@pytest.mark.parametrize("name", ATTACKS)
def test_each_attack_on_completeness_is_refused(name):
    change, says = ATTACKS[name]
    failures = verify_bundle(forged(change), keys=[KEY], log=LOG)
    assert any(says in f for f in failures), failures


@pytest.mark.skipif(NODE is None, reason="node is not installed: verify.js cannot run")
@pytest.mark.parametrize("name", ["intact", *ATTACKS])
def test_the_page_verifier_agrees(name, tmp_path):
    data = SAMPLE if name == "intact" else forged(ATTACKS[name][0])
    (tmp_path / "b.zip").write_bytes(data)
    log = subprocess.Popen(
        [sys.executable, "-u", "-m", "http.server", "0", "--bind", "127.0.0.1", "--directory", LOG],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        port = log.stdout.readline().split(" port ")[1].split(" ")[0]
        origin = "pathfinder.example/audit-log"
        pins = {"logKeys": [KEY], "log": {"url": f"http://127.0.0.1:{port}", "origin": origin}}
        (tmp_path / "pins.json").write_text(json.dumps(pins))
        done = subprocess.run(
            [NODE, str(REPO / "tests/js/verify_bundle.cjs"), str(tmp_path / "b.zip"),
             str(tmp_path / "pins.json")],
            capture_output=True, text=True, timeout=60, check=True,
        )  # fmt: skip
    finally:
        log.kill()
    page = json.loads(done.stdout)
    python = verify_bundle(data, keys=[KEY], log=LOG)
    assert page["ok"] == (python == []), (python, page["checks"])
    if name != "intact":
        failed = {c["name"] for c in page["checks"] if not c["ok"]}
        assert failed & {"completeness", f"trail {golden.v4.TRAIL_ID}: listing", "matter.json"}


@pytest.mark.parametrize("name", ["intact", *ATTACKS])
def test_the_independent_verifier_agrees(name, tmp_path):
    """The verifier an examiner wrote from docs/audit-format.md alone (tests/independent/)."""
    data = SAMPLE if name == "intact" else forged(ATTACKS[name][0])
    (tmp_path / "b.zip").write_bytes(data)
    script = REPO / "tests" / "independent" / "verify_from_doc.py"
    done = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "b.zip"), "--key", KEY, "--log", LOG],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert (done.returncode == 0) == (name == "intact"), done.stdout

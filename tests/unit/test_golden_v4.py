"""Audit format 4 is a contract with outside verifiers too: tests/data/audit_golden_vectors_v4.json
and tests/data/sample-bundle-v4.zip (the prompt withheld) are committed data. The code must
reproduce them byte for byte; each workings slot's salt and commitment is re-derived here from
docs/audit-format.md ("Format 4: sealed workings") with nothing but hashlib, hmac and json; the
sample verifies, says that it re-checked no decision and why, and holds no number of any
decision, nor the prompt's length, anywhere."""

import hashlib
import hmac
import io
import json
import subprocess
import zipfile
from pathlib import Path

from audit.evidence import bundle_format
from audit.evidence.offline_verify import check_bundle, verify_bundle
from tests.data import make_golden_v4

DATA = Path(__file__).parents[1] / "data"
VECTORS = json.loads((DATA / "audit_golden_vectors_v4.json").read_text("utf-8"))
SAMPLE = (DATA / "sample-bundle-v4.zip").read_bytes()
KEY = VECTORS["log_verifier"]
CLEAR_KEYS = {"v", "kind", "request_id", "step", "rule", "draft", "target", "params", "stop"}


def canonical(value) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def members(data: bytes) -> dict[str, bytes]:
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        return {info.filename: archive.read(info) for info in archive.infolist()}


def test_the_code_reproduces_the_committed_vectors_and_sample_bundle_byte_for_byte():
    vectors, zip_bytes = make_golden_v4.build()
    assert vectors == VECTORS
    assert zip_bytes == SAMPLE


def test_every_workings_commitment_follows_the_documented_formula():
    trail_salt = bytes.fromhex(VECTORS["trail_salt"])
    decisions = [json.loads(r["payload"]) for r in VECTORS["records"][1:-1]]
    assert all(set(d) == CLEAR_KEYS | {"workings"} for d in decisions)
    recorded = {f"step.{d['step']}.workings": d["workings"] for d in decisions}
    assert set(recorded) == set(VECTORS["slots"])
    for name, slot in VECTORS["slots"].items():
        salt = hmac.digest(trail_salt, name.encode("ascii"), "sha256")
        assert salt.hex() == slot["slot_salt"]
        digest = hashlib.sha256(b"PF-TOKEN-v3\x00" + salt + b"\x00" + canonical(slot["value"]))
        assert digest.hexdigest() == slot["commitment"] == recorded[name]
        assert not CLEAR_KEYS & set(slot["value"])  # opened: clear keys and workings, disjoint
    request = json.loads(VECTORS["records"][0]["payload"])
    assert request["v"] == 4 and "token_count" not in request["prompt"]


def test_the_sample_verifies_and_says_it_re_checked_no_decision():
    assert verify_bundle(SAMPLE, keys=[KEY]) == []
    rule = next(c for c in check_bundle(SAMPLE, keys=[KEY]) if c.name == "decision rule")
    assert rule.detail.startswith("none of the 2 decisions re-checked")
    assert "decisions whose workings are sealed" in rule.detail


def test_no_number_of_a_decision_is_in_any_member():
    """Step 0's p values, its rejected draft and every context length stay sealed: in no
    member, the report included (read as text)."""
    found = members(SAMPLE)
    report = subprocess.run(
        ["pdftotext", "-", "-"], input=found["report.pdf"], capture_output=True, check=True
    ).stdout
    assert b"their workings sealed" in report
    workings = [slot["value"] for slot in VECTORS["slots"].values()]
    secrets = {b'"0.125"', b" void", str(make_golden_v4.v3.REJECTED).encode(), b"context_length"}
    secrets |= {canonical(w["drafted"]) for w in workings}
    for name, data in [*found.items(), ("report.pdf as text", report)]:
        if name != "report.pdf":  # compressed: read as text instead
            for secret in secrets:
                assert secret not in data, (name, secret)
    assert not any(n.startswith("step.") for n in json.loads(found["disclosures.json"]))


def test_a_guessed_opening_of_the_sealed_workings_fails():
    found = members(SAMPLE)
    doc = json.loads(found["disclosures.json"])
    guess = VECTORS["slots"]["step.0.workings"]["value"]
    doc["step.0.workings"] = {"salt": "00" * 32, "value": guess}
    found["disclosures.json"] = bundle_format.json_member(doc)
    body = [(n, d) for n, d in found.items() if n != "manifest.json"]
    forged = bundle_format.deterministic_zip(
        [*body, ("manifest.json", bundle_format.manifest_member(body))]
    )
    failures = verify_bundle(forged, keys=[KEY])
    assert any("step.0.workings: the opened value is not the one" in f for f in failures)

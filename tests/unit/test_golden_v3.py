"""Audit format 3 is a contract with outside verifiers too: tests/data/audit_golden_vectors_v3.json
and tests/data/sample-bundle-v3.zip (the prompt withheld) are committed data. The code must
reproduce them byte for byte; each slot's salt and commitment is re-derived here from
docs/audit-format.md ("Format 3: sealed tokens") with nothing but hashlib, hmac and json; the
sample verifies, names what it could not re-check, and shows no sealed token anywhere."""

import hashlib
import hmac
import io
import json
import subprocess
import zipfile
from pathlib import Path

from audit.evidence import bundle_format
from audit.evidence.offline_verify import check_bundle, verify_bundle
from tests.data import make_golden_v3

DATA = Path(__file__).parents[1] / "data"
VECTORS = json.loads((DATA / "audit_golden_vectors_v3.json").read_text("utf-8"))
SAMPLE = (DATA / "sample-bundle-v3.zip").read_bytes()
KEY = VECTORS["log_verifier"]


def canonical(value) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def members(data: bytes) -> dict[str, bytes]:
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        return {info.filename: archive.read(info) for info in archive.infolist()}


def test_the_code_reproduces_the_committed_vectors_and_sample_bundle_byte_for_byte():
    vectors, zip_bytes = make_golden_v3.build()
    assert vectors == VECTORS
    assert zip_bytes == SAMPLE


def test_every_slot_s_salt_and_commitment_follow_the_documented_formulas():
    trail_salt = bytes.fromhex(VECTORS["trail_salt"])
    decisions = [json.loads(r["payload"]) for r in VECTORS["records"][1:-1]]
    recorded = {}
    for d in decisions:
        for i, entry in enumerate(d["drafted"]):
            recorded[f"step.{d['step']}.drafted.{i}"] = entry["commitment"]
        recorded[f"step.{d['step']}.correction"] = d["correction"]["commitment"]
    assert set(recorded) == set(VECTORS["slots"])
    for name, slot in VECTORS["slots"].items():
        salt = hmac.digest(trail_salt, name.encode("ascii"), "sha256")
        assert salt.hex() == slot["slot_salt"]
        digest = hashlib.sha256(b"PF-TOKEN-v3\x00" + salt + b"\x00" + canonical(slot["value"]))
        assert digest.hexdigest() == slot["commitment"] == recorded[name]
    ids = VECTORS["answer_token_ids"]
    salt = hmac.digest(trail_salt, b"answer.token_ids", "sha256")
    text = ids["text"].encode()
    assert hashlib.sha256(b"PF-TEXT-v2\x00" + salt + b"\x00" + text).hexdigest() == ids["digest"]
    answer = json.loads(VECTORS["records"][-1]["payload"])
    assert answer["output_token_ids_digest"] == ids["digest"]
    assert answer["output_token_count"] == len(json.loads(ids["text"]))


def test_the_sample_verifies_and_names_what_the_withheld_prompt_leaves_unchecked():
    assert verify_bundle(SAMPLE, keys=[KEY]) == []
    rule = next(c for c in check_bundle(SAMPLE, keys=[KEY]) if c.name == "decision rule")
    assert "not re-checked: that a rejected argmax draft differs" in rule.detail


def test_the_withheld_prompt_s_draft_is_in_no_member():
    """Step 0's rejected draft (a token from the prompt, say) stays sealed: neither its id nor
    its text is in any member, the report included, and only the emitted slots are opened."""
    found = members(SAMPLE)
    rejected = VECTORS["slots"]["step.0.drafted.1"]["value"]
    assert rejected == {"token": make_golden_v3.REJECTED, "text": " void"}
    report = subprocess.run(
        ["pdftotext", "-", "-"], input=found["report.pdf"], capture_output=True, check=True
    ).stdout
    assert b"tokens served: 2 accepted draft, 1" in report  # counted with every slot sealed
    for name, data in [*found.items(), ("report.pdf as text", report)]:
        if name != "report.pdf":  # compressed: read as text instead
            assert str(make_golden_v3.REJECTED).encode() not in data, name
            assert b" void" not in data, name
    opened = {n for n in json.loads(found["disclosures.json"]) if n.startswith("step.")}
    assert opened == {"step.0.drafted.0", "step.0.correction", "step.1.drafted.0",
                      "step.1.correction"}  # fmt: skip
    assert b'"token"' not in found["records.jsonl"]


def test_a_guessed_opening_of_the_sealed_draft_fails():
    """An examiner (or a forger) who guesses the sealed token cannot show it as opened: without
    the slot's salt the commitment does not open."""
    found = members(SAMPLE)
    doc = json.loads(found["disclosures.json"])
    doc["step.0.drafted.1"] = {"salt": "00" * 32, "value": {"token": 1729, "text": " void"}}
    found["disclosures.json"] = bundle_format.json_member(doc)
    body = [(n, d) for n, d in found.items() if n != "manifest.json"]
    forged = bundle_format.deterministic_zip(
        [*body, ("manifest.json", bundle_format.manifest_member(body))]
    )
    failures = verify_bundle(forged, keys=[KEY])
    assert any("step.0.drafted.1: the opened value is not the one" in f for f in failures)

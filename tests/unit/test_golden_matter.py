"""The golden matter bundle (tests/data/sample-matter.zip) is committed data, like the golden
one-trail bundle: the code must reproduce it byte for byte, and it verifies whole under the
golden keys, witness included."""

import io
import json
import zipfile
from pathlib import Path

from audit.evidence.offline_verify import check_bundle, verify_bundle
from tests.data import make_golden_matter

DATA = Path(__file__).parents[1] / "data"
SAMPLE = (DATA / "sample-matter.zip").read_bytes()
KEYS = json.loads((DATA / "audit_golden_vectors_v2.json").read_text("utf-8"))["keys"]


def test_the_code_reproduces_the_committed_matter_bundle_byte_for_byte():
    assert make_golden_matter.build() == SAMPLE


def test_it_verifies_under_the_golden_keys_and_witness():
    pins = {"keys": [KEYS["log_verifier"]], "witness_keys": [KEYS["witness_verifier"]]}
    assert verify_bundle(SAMPLE, **pins) == []
    names = [c.name for c in check_bundle(SAMPLE, **pins)]
    for trail in (make_golden_matter.v2.TRAIL_ID, make_golden_matter.ABANDONED_TRAIL):
        assert f"trail {trail}: inclusion proof" in names and f"trail {trail}: listing" in names
    assert "witness cosignatures" in names


def test_it_lists_the_abandoned_attempt_marked():
    with zipfile.ZipFile(io.BytesIO(SAMPLE)) as archive:
        matter = json.loads(archive.read("matter.json"))
    assert [(t["outcome"], t["abandoned"]) for t in matter["trails"]] == [
        ("succeeded", False),
        ("abandoned", True),
    ]


def test_bundles_of_the_formats_before_4_fail_unless_their_descriptive_members_are_disregarded():
    """Golden samples as they were committed before bundle format 4: their README.txt,
    verification.txt and report.pdf cannot be proven, so they verify only when told to
    disregard those three, and then verify whole."""
    pins = {"keys": [KEYS["log_verifier"]], "witness_keys": [KEYS["witness_verifier"]]}
    for name in ("sample-bundle-format2.zip", "sample-matter-format3.zip"):
        old = (DATA / "legacy" / name).read_bytes()
        failures = verify_bundle(old, **pins)
        assert len(failures) == 1 and failures[0].startswith("descriptive files: bundle format")
        assert verify_bundle(old, **pins, unproven_descriptive=True) == []


def test_a_trail_in_the_bundle_cannot_also_be_declared_left_out():
    from audit.evidence import bundle_format

    with zipfile.ZipFile(io.BytesIO(SAMPLE)) as archive:
        members = {i.filename: archive.read(i) for i in archive.infolist()}
    matter = json.loads(members["matter.json"])
    trail = matter["trails"][0]
    matter["left_out"] = [
        {"trail_id": trail["trail_id"], "job_id": trail["job_id"], "reason": "still open"}
    ]
    members["matter.json"] = bundle_format.json_member(matter)
    body = [(n, d) for n, d in members.items() if n != "manifest.json"]
    forged = bundle_format.deterministic_zip(
        [*body, ("manifest.json", bundle_format.manifest_member(body))]
    )
    failures = verify_bundle(forged, keys=[KEYS["log_verifier"]])
    assert (
        f"matter.json: trail {trail['trail_id']} is in the bundle and also listed as left out"
        in failures
    )

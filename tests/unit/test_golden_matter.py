"""The golden matter bundle (tests/data/sample-matter.zip) is committed data, like the golden
one-trail bundle: the code must reproduce it byte for byte, and it verifies whole under the
golden keys, witness included."""

import io
import json
import zipfile
from pathlib import Path

from audit.offline_verify import check_bundle, verify_bundle
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

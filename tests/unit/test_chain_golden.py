"""The stored byte format is a contract with third-party verifiers: these vectors are committed
data, and any change to how payloads are canonicalised or hashed makes this file fail."""

import hashlib
import json
from pathlib import Path

from audit.evidence import chain
from tests.data import make_golden_vectors

VECTORS = json.loads(
    (Path(__file__).parents[1] / "data" / "audit_golden_vectors.json").read_text("utf-8")
)


def _independent_sha256(*parts: str) -> str:
    # Written from docs/audit-format.md alone, not from audit.evidence.chain.
    return hashlib.sha256(b"\x00".join(part.encode("utf-8") for part in parts)).hexdigest()


def test_the_code_reproduces_the_committed_vectors_byte_for_byte():
    assert make_golden_vectors.build() == VECTORS


def test_the_documented_formulas_reproduce_every_committed_hash():
    trail_id = VECTORS["trail_id"]
    assert VECTORS["genesis_hash"] == _independent_sha256("PF-GENESIS-v1", trail_id)
    prev = VECTORS["genesis_hash"]
    for record in VECTORS["records"]:
        assert record["prev_hash"] == prev
        expected = _independent_sha256(
            "PF-RECORD-v1", trail_id, str(record["seq"]), prev, record["payload"]
        )
        assert record["record_hash"] == expected
        prev = record["record_hash"]
    assert VECTORS["ledger_genesis_hash"] == _independent_sha256("PF-LEDGER-GENESIS-v1")
    entry = VECTORS["ledger"][0]
    assert entry["entry_hash"] == _independent_sha256(
        "PF-LEDGER-v1", "0", entry["prev_hash"], entry["payload"]
    )
    assert json.loads(entry["payload"])["head"] == prev


def test_every_committed_payload_is_already_canonical():
    for record in VECTORS["records"]:
        assert chain.canonical_json(json.loads(record["payload"])) == record["payload"]


def test_the_committed_trail_verifies_with_no_failures():
    records = [
        chain.StoredRecord(
            VECTORS["trail_id"], r["seq"], r["prev_hash"], r["record_hash"], r["payload"]
        )
        for r in VECTORS["records"]
    ]
    summary = chain.verify_trail(VECTORS["trail_id"], records)
    assert summary.failures == []
    assert summary.record_count == 3

"""Regenerate tests/data/audit_golden_vectors.json. Run only when the byte format changes on
purpose (which also means a new format version in docs/audit-format.md)."""

import json
from pathlib import Path

from audit.evidence import chain

TRAIL_ID = "0b0e3f4c-8a52-4e1c-9d2e-5a7f3c1b9e10"
JOB_ID = "6f1c2a9e-3d4b-4c5e-8f70-1a2b3c4d5e6f"
PAYLOADS = [
    {"v": 1, "step": 0, "emitted": [5, 9, 7], "p": "0.25", "text": "naïve “quote”"},
    {"v": 1, "step": 1, "emitted": [3], "q": "1e-05", "nested": {"b": None, "a": True}},
    {"v": 1, "step": 2, "emitted": [], "stop": "eos"},
]


def build() -> dict:
    records, prev = [], chain.genesis_hash(TRAIL_ID)
    for seq, payload in enumerate(PAYLOADS):
        text = chain.canonical_json(payload)
        digest = chain.record_hash(TRAIL_ID, seq, prev, text)
        records.append({"seq": seq, "prev_hash": prev, "record_hash": digest, "payload": text})
        prev = digest
    leaf = chain.ledger_payload(
        format_version=1,
        trail_id=TRAIL_ID,
        job_id=JOB_ID,
        record_count=len(records),
        head_hash=prev,
        outcome="succeeded",
    )
    ledger_prev = chain.ledger_genesis_hash()
    return {
        "format_version": chain.FORMAT_VERSION,
        "trail_id": TRAIL_ID,
        "genesis_hash": chain.genesis_hash(TRAIL_ID),
        "records": records,
        "ledger_genesis_hash": ledger_prev,
        "ledger": [
            {
                "seq": 0,
                "prev_hash": ledger_prev,
                "entry_hash": chain.ledger_entry_hash(0, ledger_prev, leaf),
                "payload": leaf,
            }
        ],
    }


if __name__ == "__main__":
    path = Path(__file__).with_name("audit_golden_vectors.json")
    path.write_text(json.dumps(build(), indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {path}")

"""Regenerate tests/data/audit_golden_vectors_v4.json and tests/data/sample-bundle-v4.zip: an
audit-format-4 trail (each decision's workings sealed) exported with the prompt withheld. Run
only when the byte format changes on purpose; tests/unit/test_golden_v4.py fails until the
committed files match.

The same keys, question, answer and decisions as the format-3 sample (make_golden_v3): step 0
drafted two tokens and the target rejected the second. With the prompt withheld no decision's
workings are opened, so neither that draft nor any number of either step is in the bundle.
"""

import hashlib
import json
from pathlib import Path

from audit.evidence import binding, bundle, chain, checkpoints, merkle, receipts, sealing
from tests.data import make_golden_v3 as v3
from tests.data import make_golden_vectors_v2 as v2

HERE = Path(__file__).parent
TRAIL_ID = "9d1c2b3a-4e5f-4a6b-8c7d-2e3f4a5b6c7d"
JOB_ID = "1b2c3d4e-5f6a-4b7c-8d9e-0f1a2b3c4d5e"
SALT = "4d" * 32
LEAF_INDEX = 2
FORMAT = 4


def _decision(step: int) -> dict:
    return {**v3._decision(step), "request_id": JOB_ID}


def payloads() -> tuple[list[dict], dict]:
    """The trail's payloads as stored (decisions sealed), and every slot's value."""
    request = binding.request_payload(
        trail_salt=SALT,
        job_id=JOB_ID,
        matter="Golden v. Vectors",
        request_id="client-0004",
        attempt=1,
        previous_trail=None,
        model_spec="golden",
        models={"draft": v2.MODEL, "target": v2.MODEL},
        question=v2.QUESTION,
        submitted_at="2026-01-01T00:00:00.000000Z",
        format_version=FORMAT,
    )
    values, sealed = {}, []
    for step in (0, 1):
        payload, slots = sealing.seal_decision(_decision(step), SALT, FORMAT)
        sealed.append(payload)
        values.update(slots)
    answer = binding.answer_payload(
        trail_salt=SALT, answer=v2.ANSWER, steps=2, format_version=FORMAT
    )
    return [request, *sealed, answer], values


def _disclosures() -> dict:
    """The prompt withheld, the answer disclosed, no decision opened: as an export with
    --withhold prompt writes them (audit.export)."""
    disclosures = {name: {"withheld": True} for name in v2.QUESTION.texts()}
    disclosures[binding.ANSWER_TEXT] = {"salt": binding.field_salt(SALT, binding.ANSWER_TEXT)}
    disclosures[binding.ANSWER_TOKEN_IDS] = {
        "salt": binding.field_salt(SALT, binding.ANSWER_TOKEN_IDS),
        "value": list(v2.ANSWER.token_ids),
    }
    return disclosures


def build() -> tuple[dict, bytes]:
    stored, values = payloads()
    records = v2.chained(TRAIL_ID, stored)
    leaves = [
        chain.ledger_payload(
            format_version=FORMAT if i == LEAF_INDEX else 3,
            trail_id=TRAIL_ID if i == LEAF_INDEX else f"00000000-0000-4000-8000-{i:012d}",
            job_id=JOB_ID if i == LEAF_INDEX else f"00000000-0000-4000-9000-{i:012d}",
            record_count=len(records) if i == LEAF_INDEX else i,
            head_hash=records[-1][2] if i == LEAF_INDEX else hashlib.sha256(bytes([i])).hexdigest(),
            outcome="succeeded",
        )
        for i in range(v2.TREE_SIZE)
    ]
    data = [leaf.encode() for leaf in leaves]
    log_private, log_verifier = checkpoints.generate_signing_key(v2.ORIGIN, seed=v2.LOG_SEED)
    signed = checkpoints.sign_checkpoint(v2.ORIGIN, v2.TREE_SIZE, merkle.root(data), log_private)
    zip_bytes = bundle.bundle_bytes(
        records=records,
        trail_id=TRAIL_ID,
        format_version=FORMAT,
        ledger_index=LEAF_INDEX,
        ledger_payload=leaves[LEAF_INDEX],
        proof=merkle.inclusion_proof(LEAF_INDEX, data),
        tree_size=v2.TREE_SIZE,
        checkpoint_note=signed,
        timestamp_token=None,
        verifier_key=log_verifier,
        receipt_signature=receipts.checkpoint_signature(log_private, v2.ORIGIN, merkle.root(data)),
        texts=bundle.Texts(_disclosures(), "", v2.ANSWER.text),
        models={"draft": v2.MODEL, "target": v2.MODEL},
        params=v2.QUESTION.params,
    )
    slots = {
        name: {
            "value": value,
            "slot_salt": sealing.slot_salt(SALT, name),
            "commitment": sealing.commitment(sealing.slot_salt(SALT, name), value),
        }
        for name, value in sorted(values.items())
    }
    vectors = {
        "about": "Audit format 4 golden vectors (sealed workings); docs/audit-format.md, "
        '"Format 4: sealed workings", specifies each value.',
        "trail_id": TRAIL_ID,
        "trail_salt": SALT,
        "records": [
            {"seq": s, "prev_hash": p, "record_hash": h, "payload": t} for s, p, h, t in records
        ],
        "slots": slots,
        "log_verifier": log_verifier,
        "bundle": {
            "file": "sample-bundle-v4.zip",
            "withheld": "prompt",
            "sha256": hashlib.sha256(zip_bytes).hexdigest(),
        },  # fmt: skip
    }
    return vectors, zip_bytes


def write() -> None:
    vectors, zip_bytes = build()
    (HERE / "audit_golden_vectors_v4.json").write_text(
        json.dumps(vectors, indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
    )
    (HERE / "sample-bundle-v4.zip").write_bytes(zip_bytes)
    print(f"wrote the v4 vectors and sample bundle ({len(zip_bytes)} bytes) to {HERE}")


if __name__ == "__main__":
    write()

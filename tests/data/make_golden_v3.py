"""Regenerate tests/data/audit_golden_vectors_v3.json and tests/data/sample-bundle-v3.zip: an
audit-format-3 trail (its decisions' tokens sealed) exported with the prompt withheld. Run only
when the byte format changes on purpose; tests/unit/test_golden_v3.py fails until the committed
files match.

The same keys, question and answer as the format-2 sample (make_golden_vectors_v2). Step 0
drafted two tokens and the target rejected the second (a token copied from the prompt, say),
so its slot stays sealed in the bundle; the emitted tokens are opened with the answer.
"""

import hashlib
import json
from pathlib import Path

from audit.evidence import binding, bundle, chain, checkpoints, merkle, receipts, sealing
from tests.data import make_golden_vectors_v2 as v2

HERE = Path(__file__).parent
TRAIL_ID = "5e3b1a9c-7d2f-4c6e-8b0a-1f2e3d4c5b6a"
JOB_ID = "8a7b6c5d-4e3f-4a2b-9c1d-0e1f2a3b4c5d"
SALT = "3c" * 32
LEAF_INDEX = 3
REJECTED = 1729  # step 0's second drafted token, rejected: sealed when the prompt is withheld
# The answer's tokens (v2.ANSWER: 40, 41, 42, 2 = "Tenant shall") and their texts.
TOKEN_TEXT = {40: "Ten", 41: "ant", 42: " shall"}


def _decision(step: int) -> dict:
    """A greedy decision in clear, as the engine writes it before the store seals it."""
    clear = v2._decision(step, [40, 41] if step == 0 else [42, 2], None if step == 0 else "eos")
    clear = {**clear, "v": 3, "request_id": JOB_ID, "draft_source": None}
    for entry in clear["drafted"]:
        entry["text"] = TOKEN_TEXT[entry["token"]]
    if step == 0:  # drafted 40 and REJECTED; 40 accepted, the argmax 41 replaced the other
        rejected = {"token": REJECTED, "text": " void", "q": "1.0", "p": "0.125",
                    "ratio": None, "u": None, "accepted": False}  # fmt: skip
        clear["drafted"].append(rejected)
        clear["draft_length"] = 2
        clear["correction"] = {"token": 41, "text": "ant", "kind": "argmax", "u": None, "p": "0.5"}
        clear["rationale"] = (
            "Accepted 1 of 2 drafted tokens; the token at position 2 was rejected (not the "
            "target's argmax) and its replacement was taken as the target's argmax."
        )
    else:
        clear["correction"]["text"] = "</s>"
        clear["rationale"] = (
            "Accepted all 1 drafted tokens; the bonus token was taken as the target's argmax; "
            "generation stopped at the end-of-sequence token."
        )
    clear["emitted_text"] = [clear["drafted"][0]["text"], clear["correction"]["text"]]
    return clear


def payloads() -> tuple[list[dict], dict]:
    """The trail's payloads as stored (decisions sealed), and every slot's value."""
    request = binding.request_payload(
        trail_salt=SALT,
        job_id=JOB_ID,
        matter="Golden v. Vectors",
        request_id="client-0003",
        attempt=1,
        previous_trail=None,
        model_spec="golden",
        models={"draft": v2.MODEL, "target": v2.MODEL},
        question=v2.QUESTION,
        submitted_at="2026-01-01T00:00:00.000000Z",
        format_version=3,
    )
    values, sealed = {}, []
    for step in (0, 1):
        payload, slots = sealing.seal_decision(_decision(step), SALT)
        sealed.append(payload)
        values.update(slots)
    answer = binding.answer_payload(trail_salt=SALT, answer=v2.ANSWER, steps=2, format_version=3)
    return [request, *sealed, answer], values


def _disclosures(values: dict) -> dict:
    """The prompt withheld; the answer disclosed with its emitted tokens' slots, as an export
    with --withhold prompt writes them (audit.export)."""
    disclosures = {name: {"withheld": True} for name in v2.QUESTION.texts()}
    disclosures[binding.ANSWER_TEXT] = {"salt": binding.field_salt(SALT, binding.ANSWER_TEXT)}
    ids = list(v2.ANSWER.token_ids)
    disclosures[binding.ANSWER_TOKEN_IDS] = {
        "salt": binding.field_salt(SALT, binding.ANSWER_TOKEN_IDS),
        "value": ids,
    }
    for name in ("step.0.drafted.0", "step.0.correction", "step.1.drafted.0", "step.1.correction"):
        disclosures[name] = {"salt": sealing.slot_salt(SALT, name), "value": values[name]}
    return disclosures


def build() -> tuple[dict, bytes]:
    stored, values = payloads()
    records = v2.chained(TRAIL_ID, stored)
    leaves = [
        chain.ledger_payload(
            format_version=3 if i == LEAF_INDEX else 2,
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
        format_version=3,
        ledger_index=LEAF_INDEX,
        ledger_payload=leaves[LEAF_INDEX],
        proof=merkle.inclusion_proof(LEAF_INDEX, data),
        tree_size=v2.TREE_SIZE,
        checkpoint_note=signed,
        timestamp_token=None,
        verifier_key=log_verifier,
        receipt_signature=receipts.checkpoint_signature(log_private, v2.ORIGIN, merkle.root(data)),
        texts=bundle.Texts(_disclosures(values), "", v2.ANSWER.text),
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
        "about": "Audit format 3 golden vectors (sealed tokens); docs/audit-format.md, "
        '"Format 3: sealed tokens", specifies each value.',
        "trail_id": TRAIL_ID,
        "trail_salt": SALT,
        "records": [
            {"seq": s, "prev_hash": p, "record_hash": h, "payload": t} for s, p, h, t in records
        ],
        "slots": slots,
        "answer_token_ids": {
            "text": chain.canonical_json(list(v2.ANSWER.token_ids)),
            "field_salt": binding.field_salt(SALT, binding.ANSWER_TOKEN_IDS),
            "digest": binding.bound_digest(
                SALT, binding.ANSWER_TOKEN_IDS, chain.canonical_json(list(v2.ANSWER.token_ids))
            ),
        },
        "log_verifier": log_verifier,
        "bundle": {
            "file": "sample-bundle-v3.zip",
            "withheld": "prompt",
            "sha256": hashlib.sha256(zip_bytes).hexdigest(),
        },  # fmt: skip
    }
    return vectors, zip_bytes


def write() -> None:
    vectors, zip_bytes = build()
    (HERE / "audit_golden_vectors_v3.json").write_text(
        json.dumps(vectors, indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
    )
    (HERE / "sample-bundle-v3.zip").write_bytes(zip_bytes)
    print(f"wrote the v3 vectors and sample bundle ({len(zip_bytes)} bytes) to {HERE}")


if __name__ == "__main__":
    write()

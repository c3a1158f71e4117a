"""Regenerate tests/data/audit_golden_vectors_v2.json and tests/data/sample-bundle.zip. Run only
when the byte format changes on purpose (which also means a new version in
docs/audit-format.md): tests/unit/test_golden_v2.py fails until the committed files match.

Everything is fixed: the trail id, the salt, the keys (from fixed seeds), the cosignature time.
"""

import hashlib
import io
import json
import zipfile
from pathlib import Path

from audit.evidence import binding, bundle, chain, checkpoints, merkle, receipts

HERE = Path(__file__).parent
TRAIL_ID = "7d1f0c2e-4b3a-4e5d-9c8b-0a1b2c3d4e5f"
JOB_ID = "2c9e8f7a-6b5d-4c3e-8a1f-0e9d8c7b6a50"
SALT = "5a" * 32
ORIGIN = "pathfinder.example/audit-log"
LOG_SEED = bytes(range(32))
WITNESS_NAME = "witness.example/golden"
WITNESS_SEED = hashlib.sha256(b"pathfinder golden witness").digest()
COSIGNED_AT = 1767225600  # 2026-01-01T00:00:00Z
LEAF_INDEX = 2
TREE_SIZE = 5
PARAMS = {
    "max_tokens": 4,
    "temperature": "0.0",
    "top_k": 0,
    "top_p": "1.0",
    "seed": 42,
    "draft_length": 2,
    "eos_token_id": 2,
}
QUESTION = binding.Question(
    given_kind="messages",
    given=[{"role": "user", "content": "Quote § 7: “Tenant shall…”"}],
    rendered="<|user|>Quote § 7: “Tenant shall…”\n<|assistant|>",
    token_ids=(1, 17, 33, 8, 2),
    params={**PARAMS, "stop": ["\n\n"], "stream": False},
)
ANSWER = binding.Answer(token_ids=(40, 41, 42, 2), text="Tenant shall", stop_reason="eos")
MODEL = {
    "name": "golden-model",
    "revision": "1",
    "sha256": "c" * 64,
    "runtime": "pathfinder-stub",
    "runtime_version": "1",
}


def _decision(step: int, emitted: list[int], stop: str | None, prompt_tokens: int = 5) -> dict:
    return {
        "v": 2,
        "kind": "decision",
        "request_id": JOB_ID,
        "step": step,
        "rule": "greedy-argmax",
        "draft": MODEL,
        "target": MODEL,
        "params": PARAMS,
        "context_length": prompt_tokens + 2 * step,
        "draft_length": 1,
        "drafted": [
            {
                "token": emitted[0],
                "q": "1.0",
                "p": "0.5",
                "ratio": None,
                "u": None,
                "accepted": True,
            },
        ],  # fmt: skip
        "accepted_count": 1,
        "correction": {"token": emitted[-1], "kind": "argmax-bonus", "u": None, "p": "0.25"},
        "emitted": emitted,
        "stop": stop,
        "rationale": "Accepted all 1 drafted tokens; bonus token was taken as the target's argmax.",
        "timings_us": {"draft": 0, "verify": 0},
    }


def _answer_v2() -> dict:
    """The answer record as format 2 wrote it: the output's token ids in clear."""
    v3 = binding.answer_payload(trail_salt=SALT, answer=ANSWER, steps=2, format_version=3)
    kept = {k: v for k, v in v3.items() if not k.startswith("output_token")}
    return {**kept, "v": 2, "output_token_ids": list(ANSWER.token_ids)}


def payloads() -> list[dict]:
    """The trail in audit format 2 (this file's whole point), whatever format the code now
    writes: the request record as format 2 wrote it, under v 2."""
    return [
        {
            **binding.request_payload(
                trail_salt=SALT,
                job_id=JOB_ID,
                matter="Golden v. Vectors",
                request_id="client-0001",
                attempt=1,
                previous_trail=None,
                model_spec="golden",
                models={"draft": MODEL, "target": MODEL},
                question=QUESTION,
                format_version=3,
            ),
            "v": 2,
        },
        _decision(0, [40, 41], None),
        _decision(1, [42, 2], "eos"),
        _answer_v2(),
    ]


def chained(trail_id: str, stored: list[dict]) -> list[tuple[int, str, str, str]]:
    """(seq, prev_hash, record_hash, canonical payload) of each stored payload, chained from
    the trail's genesis: the golden generators' records."""
    records, prev = [], chain.genesis_hash(trail_id)
    for seq, payload in enumerate(stored):
        text = chain.canonical_json(payload)
        digest = chain.record_hash(trail_id, seq, prev, text)
        records.append((seq, prev, digest, text))
        prev = digest
    return records


def _records() -> list[tuple[int, str, str, str]]:
    return chained(TRAIL_ID, payloads())


def _leaves(records) -> list[str]:
    others = [
        chain.ledger_payload(
            format_version=2,
            trail_id=f"00000000-0000-4000-8000-{i:012d}",
            job_id=f"00000000-0000-4000-9000-{i:012d}",
            record_count=i,
            head_hash=hashlib.sha256(bytes([i])).hexdigest(),
            outcome="failed" if i % 2 else "succeeded",
        )
        for i in range(TREE_SIZE)
    ]
    others[LEAF_INDEX] = chain.ledger_payload(
        format_version=2,
        trail_id=TRAIL_ID,
        job_id=JOB_ID,
        record_count=len(records),
        head_hash=records[-1][2],
        outcome="succeeded",
    )
    return others


def _hex(digests) -> list[str]:
    return [d.hex() for d in digests]


def build() -> tuple[dict, bytes]:
    records = _records()
    leaves = _leaves(records)
    data = [leaf.encode() for leaf in leaves]
    log_private, log_verifier = checkpoints.generate_signing_key(ORIGIN, seed=LOG_SEED)
    witness_private, witness_verifier = checkpoints.generate_signing_key(
        WITNESS_NAME, seed=WITNESS_SEED, alg=checkpoints.ALG_COSIGNATURE
    )
    root = merkle.root(data)
    signed = checkpoints.sign_checkpoint(ORIGIN, TREE_SIZE, root, log_private)
    cosignature = checkpoints.cosign(signed, witness_private, COSIGNED_AT)
    note = checkpoints.with_signature_lines(signed, [cosignature])
    texts = {**QUESTION.texts(), binding.ANSWER_TEXT: ANSWER.text}
    disclosures = {}
    for name, text in texts.items():
        disclosures[name] = {"salt": binding.field_salt(SALT, name)}
        if name not in (binding.RENDERED, binding.ANSWER_TEXT):
            disclosures[name]["value"] = json.loads(text)
    zip_bytes = bundle.bundle_bytes(
        records=records,
        trail_id=TRAIL_ID,
        format_version=2,
        ledger_index=LEAF_INDEX,
        ledger_payload=leaves[LEAF_INDEX],
        proof=merkle.inclusion_proof(LEAF_INDEX, data),
        tree_size=TREE_SIZE,
        checkpoint_note=note,
        timestamp_token=None,
        verifier_key=log_verifier,
        receipt_signature=receipts.checkpoint_signature(log_private, ORIGIN, root),
        texts=bundle.Texts(disclosures, QUESTION.rendered, ANSWER.text),
        models={"draft": MODEL, "target": MODEL},
        params=QUESTION.params,
    )
    vectors = {
        "about": "Audit format 2 golden vectors; docs/audit-format.md specifies each value.",
        "trail_id": TRAIL_ID,
        "trail_salt": SALT,
        "genesis_hash": chain.genesis_hash(TRAIL_ID),
        "records": [
            {"seq": s, "prev_hash": p, "record_hash": h, "payload": t} for s, p, h, t in records
        ],
        "texts": {
            name: {
                "text": text,
                "field_salt": binding.field_salt(SALT, name),
                "digest": binding.bound_digest(SALT, name, text),
            }
            for name, text in texts.items()
        },
        "merkle": {
            "leaves": leaves,
            "leaf_hashes": _hex(merkle.leaf_hash(d) for d in data),
            "roots": {str(n): merkle.root(data[:n]).hex() for n in range(TREE_SIZE + 1)},
            "inclusion": {
                "leaf_index": LEAF_INDEX,
                "tree_size": TREE_SIZE,
                "proof": _hex(merkle.inclusion_proof(LEAF_INDEX, data)),
            },
            "consistency": [
                {
                    "old_size": old,
                    "new_size": TREE_SIZE,
                    "proof": _hex(merkle.consistency_proof(old, data)),
                }
                for old in (1, 2, 3, 4)
            ],  # fmt: skip
        },
        "keys": {
            "log_seed_hex": LOG_SEED.hex(),
            "log_private": log_private,
            "log_verifier": log_verifier,
            "log_key_id": log_verifier.split("+")[1],
            "witness_seed_hex": WITNESS_SEED.hex(),
            "witness_private": witness_private,
            "witness_verifier": witness_verifier,
            "witness_key_id": witness_verifier.split("+")[1],
        },
        "checkpoint": {
            "body": checkpoints.note_body(signed),
            "signed_note": signed,
            "cosignature_time": COSIGNED_AT,
            "cosignature_line": cosignature,
            "cosigned_note": note,
        },
        "bundle": {
            "file": "sample-bundle.zip",
            "sha256": hashlib.sha256(zip_bytes).hexdigest(),
            "manifest": _manifest(zip_bytes),
        },
    }
    return vectors, zip_bytes


def _manifest(zip_bytes: bytes) -> str:
    with zipfile.ZipFile(io.BytesIO(zip_bytes)) as archive:
        return archive.read("manifest.json").decode()


def write() -> None:
    vectors, zip_bytes = build()
    (HERE / "audit_golden_vectors_v2.json").write_text(
        json.dumps(vectors, indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
    )
    (HERE / "sample-bundle.zip").write_bytes(zip_bytes)
    print(f"wrote the vectors and the sample bundle ({len(zip_bytes)} bytes) to {HERE}")


if __name__ == "__main__":
    write()

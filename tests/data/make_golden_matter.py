"""Regenerate tests/data/sample-matter.zip, the golden matter bundle (matter format 2): two trails
of matter "Golden v. Vectors" under one cosigned checkpoint (the golden v2 trail, and an
abandoned attempt of another job), and tests/data/sample-log/, the public entry tiles of its
log of five tagged leaves (the two, another matter's, one with no request, one more of
another matter), against which the bundle is complete. Run only when the matter format changes
on purpose: tests/unit/test_golden_matter.py fails until the committed files match.

Everything is fixed, as in make_golden_vectors_v2 (whose trail, keys and seeds it reuses); the
report is ReportLab's in invariant mode, at the version pyproject.toml pins.
"""

import hashlib
import json
import struct
from pathlib import Path

from audit.evidence import binding, bundle, chain, checkpoints, matter_leaves, merkle, receipts
from audit.evidence.tile_math import tile_path
from tests.data import make_golden_vectors_v2 as v2

HERE = Path(__file__).parent
MATTER_NAME = "Golden v. Vectors"
ABANDONED_TRAIL = "9e8d7c6b-5a49-4838-a726-15f4e3d2c1b0"
ABANDONED_JOB = "4b3a2918-0706-4f5e-8d4c-3b2a19080706"
ABANDONED_SALT = "6b" * 32
ABANDONED_INDEX = 3  # the golden trail is leaf 2 of the same tree of 5
MATTER_KEY = "6d" * 32
OTHER_MATTER_KEY = "a1" * 32
SEALED_AT = "2026-01-01T00:00:00.000000Z"
LOG_DIR = HERE / "sample-log"


def _tagged(leaf: str, key: str | None) -> str:
    """The leaf as sealed since the matter tags: tagged under `key` (None: no request)."""
    sealed = json.loads(leaf)
    tag = matter_leaves.matter_tag(key, sealed["trail"]) if key else None
    sealed["matter_tag"], sealed["sealed_at"] = tag, SEALED_AT
    return chain.canonical_json(sealed)


def _abandoned_records() -> list[tuple[int, str, str, str]]:
    """A job whose worker died after one step: its request and one decision, no answer."""
    question = binding.Question(
        given_kind="prompt",
        given="Summarise clause 9.",
        rendered="Summarise clause 9.",
        token_ids=(1, 21, 22),
        params=v2.QUESTION.params,
    )
    payloads = [  # in audit format 2, like the rest of this sample
        {
            **binding.request_payload(
                trail_salt=ABANDONED_SALT,
                job_id=ABANDONED_JOB,
                matter=MATTER_NAME,
                request_id=None,
                attempt=1,
                previous_trail=None,
                model_spec="golden",
                models={"draft": v2.MODEL, "target": v2.MODEL},
                question=question,
                format_version=3,
            ),
            "v": 2,
        },
        {**v2._decision(0, [50, 51], None, prompt_tokens=3), "request_id": ABANDONED_JOB},
    ]
    return v2.chained(ABANDONED_TRAIL, payloads), question


def log_leaves() -> tuple[list[str], list[bytes]]:
    """The sample log: leaves 2 and 3 the matter's, 0 and 4 another matter's, 1 a trail that
    recorded no request."""
    abandoned, _ = _abandoned_records()
    leaves = v2._leaves(v2._records())
    leaves[ABANDONED_INDEX] = chain.ledger_payload(
        format_version=2,
        trail_id=ABANDONED_TRAIL,
        job_id=ABANDONED_JOB,
        record_count=len(abandoned),
        head_hash=abandoned[-1][2],
        outcome="abandoned",
    )
    # A trail with no request recorded nothing at all (its models never loaded): 0 records, its
    # head the genesis hash; another matter's trail recorded at least its request.
    for index, count, outcome in ((0, 2, "succeeded"), (1, 0, "failed")):
        trail = f"00000000-0000-4000-8000-{index:012d}"
        leaves[index] = chain.ledger_payload(
            format_version=2,
            trail_id=trail,
            job_id=f"00000000-0000-4000-9000-{index:012d}",
            record_count=count,
            head_hash=chain.genesis_hash(trail) if count == 0 else hashlib.sha256(b"x").hexdigest(),
            outcome=outcome,
        )
    keys = [OTHER_MATTER_KEY, None, MATTER_KEY, MATTER_KEY, OTHER_MATTER_KEY]
    leaves = [_tagged(leaf, key) for leaf, key in zip(leaves, keys, strict=True)]
    return leaves, [leaf.encode() for leaf in leaves]


def log_files() -> dict[str, bytes]:
    """The log's one (partial) entry tile, by its path under sample-log/."""
    _, data = log_leaves()
    entries = b"".join(struct.pack(">H", len(d)) + d for d in data)
    return {tile_path(0, 0, len(data), entries=True): entries}


def build() -> bytes:
    return bundle.matter_bundle_bytes(**parts())


def parts() -> dict:
    """The bundle writer's keyword fields for the sample: matter.json, the trails' evidence and
    the signed checkpoint."""
    golden = v2._records()
    abandoned, question = _abandoned_records()
    leaves, data = log_leaves()
    log_private, log_verifier = checkpoints.generate_signing_key(v2.ORIGIN, seed=v2.LOG_SEED)
    witness_private, _ = checkpoints.generate_signing_key(
        v2.WITNESS_NAME, seed=v2.WITNESS_SEED, alg=checkpoints.ALG_COSIGNATURE
    )
    signed = checkpoints.sign_checkpoint(v2.ORIGIN, v2.TREE_SIZE, merkle.root(data), log_private)
    note = checkpoints.with_signature_lines(
        signed, [checkpoints.cosign(signed, witness_private, v2.COSIGNED_AT)]
    )

    def disclosed(salt: str, texts: dict) -> dict:
        out = {}
        for name, text in texts.items():
            out[name] = {"salt": binding.field_salt(salt, name)}
            if name not in (binding.RENDERED, binding.ANSWER_TEXT):
                out[name]["value"] = json.loads(text)
        return out

    golden_texts = bundle.Texts(
        disclosed(v2.SALT, {**v2.QUESTION.texts(), binding.ANSWER_TEXT: v2.ANSWER.text}),
        v2.QUESTION.rendered,
        v2.ANSWER.text,
    )
    abandoned_texts = bundle.Texts(
        disclosed(ABANDONED_SALT, question.texts()), question.rendered, ""
    )
    models = {"draft": v2.MODEL, "target": v2.MODEL}
    trails = [
        bundle.TrailEvidence(
            golden, v2.TRAIL_ID, 2, v2.LEAF_INDEX, leaves[v2.LEAF_INDEX],
            merkle.inclusion_proof(v2.LEAF_INDEX, data), golden_texts, models, v2.QUESTION.params,
        ),
        bundle.TrailEvidence(
            abandoned, ABANDONED_TRAIL, 2, ABANDONED_INDEX, leaves[ABANDONED_INDEX],
            merkle.inclusion_proof(ABANDONED_INDEX, data), abandoned_texts, models,
            question.params,
        ),
    ]  # fmt: skip
    listed = [
        {
            "trail_id": v2.TRAIL_ID,
            "job_id": v2.JOB_ID,
            "attempt": 1,
            "outcome": "succeeded",
            "abandoned": False,
            "leaf_index": v2.LEAF_INDEX,
        },
        {
            "trail_id": ABANDONED_TRAIL,
            "job_id": ABANDONED_JOB,
            "attempt": 1,
            "outcome": "abandoned",
            "abandoned": True,
            "leaf_index": ABANDONED_INDEX,
        },
    ]
    matter = {
        "format_version": 2,
        "matter": MATTER_NAME,
        "matter_key": MATTER_KEY,
        "since": None,
        "until": None,
        "tree_size": v2.TREE_SIZE,
        "trails": listed,
        "left_out": [],
    }
    return dict(
        matter=matter,
        trails=trails,
        checkpoint_note=note,
        timestamp_token=None,
        verifier_key=log_verifier,
        receipt_signature=receipts.checkpoint_signature(log_private, v2.ORIGIN, merkle.root(data)),
    )


def write() -> None:
    zip_bytes = build()
    (HERE / "sample-matter.zip").write_bytes(zip_bytes)
    for path, body in log_files().items():
        (LOG_DIR / path).parent.mkdir(parents=True, exist_ok=True)
        (LOG_DIR / path).write_bytes(body)
    digest = hashlib.sha256(zip_bytes).hexdigest()
    print(f"wrote the sample matter bundle ({len(zip_bytes)} bytes, SHA-256 {digest}) to {HERE}")


if __name__ == "__main__":
    write()

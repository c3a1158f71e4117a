"""Regenerate tests/data/sample-matter-v3.zip, the golden matter bundle of matter format 3, and
tests/data/sample-log-v3/, the public entry tile of its log: selection leaves (each with its
submission time and batch tag) and a left_out entry for each reason a verifier checks. Run only
when the matter format changes on purpose: tests/unit/test_golden_matter_v3.py fails until the
committed files match.

The selection is matter "Golden v. Vectors", jobs submitted from 2026-01-01 to 2026-01-31. The
log holds five leaves:

    0  another matter's trail
    1  a trail of the matter that recorded no request (0 records, tag null): left out, no_request
    2  the audit-format-4 golden trail (make_golden_v4, prompt withheld), submitted 2026-01-01:
       the bundle's one trail
    3  a trail of the matter submitted 2025-12-31: left out, outside_selection
    4  another matter's trail

and one more trail of the matter, still open (no leaf): left out, open.
"""

import hashlib
import struct
from pathlib import Path

from audit.evidence import bundle, chain, checkpoints, matter_leaves, merkle, receipts
from audit.evidence.tile_math import tile_path
from tests.data import make_golden_v4 as v4
from tests.data import make_golden_vectors_v2 as v2

HERE = Path(__file__).parent
LOG_DIR = HERE / "sample-log-v3"
MATTER_NAME = "Golden v. Vectors"
MATTER_KEY = "6d" * 32
OTHER_MATTER_KEY = "a1" * 32
SINCE, UNTIL = "2026-01-01", "2026-01-31"
SEALED_AT = "2026-01-02T00:00:00.000000Z"
OPEN_TRAIL = "00000000-0000-4000-8000-00000000000a"


def _trail(i: int) -> str:
    return f"00000000-0000-4000-8000-{i:012d}"


def _job(i: int) -> str:
    return f"00000000-0000-4000-9000-{i:012d}"


def _leaf(i: int, key: str | None, submitted_at: str | None, records: int, head: str) -> str:
    """A selection leaf: tagged under `key` with its submission time and a batch tag of no batch
    (all three null for a trail that recorded no request)."""
    trail = v4.TRAIL_ID if i == v4.LEAF_INDEX else _trail(i)
    return chain.ledger_payload(
        format_version=4,
        trail_id=trail,
        job_id=v4.JOB_ID if i == v4.LEAF_INDEX else _job(i),
        record_count=records,
        head_hash=head,
        outcome="succeeded" if records else "failed",
        tagged=(matter_leaves.matter_tag(key, trail) if key else None, SEALED_AT),
        selection=(submitted_at, matter_leaves.batch_tag(key, trail, "") if key else None),
    )


def log_leaves() -> tuple[list[str], list[bytes]]:
    records = v2.chained(v4.TRAIL_ID, v4.payloads()[0])

    def head(i: int) -> str:  # a head of that trail's own (each chain starts from its id)
        return hashlib.sha256(_trail(i).encode()).hexdigest()

    leaves = [
        _leaf(0, OTHER_MATTER_KEY, "2026-01-01T09:00:00.000000Z", 3, head(0)),
        _leaf(1, None, None, 0, chain.genesis_hash(_trail(1))),
        _leaf(2, MATTER_KEY, "2026-01-01T00:00:00.000000Z", len(records), records[-1][2]),
        _leaf(3, MATTER_KEY, "2025-12-31T23:59:59.999999Z", 3, head(3)),
        _leaf(4, OTHER_MATTER_KEY, "2026-01-01T10:00:00.000000Z", 3, head(4)),
    ]
    return leaves, [leaf.encode() for leaf in leaves]


def log_files() -> dict[str, bytes]:
    """The log's one (partial) entry tile, by its path under sample-log-v3/."""
    _, data = log_leaves()
    entries = b"".join(struct.pack(">H", len(d)) + d for d in data)
    return {tile_path(0, 0, len(data), entries=True): entries}


def build() -> bytes:
    records = v2.chained(v4.TRAIL_ID, v4.payloads()[0])
    leaves, data = log_leaves()
    log_private, log_verifier = checkpoints.generate_signing_key(v2.ORIGIN, seed=v2.LOG_SEED)
    note = checkpoints.sign_checkpoint(v2.ORIGIN, len(data), merkle.root(data), log_private)
    trail = bundle.TrailEvidence(
        records, v4.TRAIL_ID, v4.FORMAT, v4.LEAF_INDEX, leaves[v4.LEAF_INDEX],
        merkle.inclusion_proof(v4.LEAF_INDEX, data),
        bundle.Texts(v4._disclosures(), "", v2.ANSWER.text),
        {"draft": v2.MODEL, "target": v2.MODEL}, v2.QUESTION.params,
    )  # fmt: skip
    matter = {
        "format_version": 3,
        "matter": MATTER_NAME,
        "matter_key": MATTER_KEY,
        "batch": None,
        "since": SINCE,
        "until": UNTIL,
        "tree_size": len(data),
        "trails": [
            {
                "trail_id": v4.TRAIL_ID,
                "job_id": v4.JOB_ID,
                "attempt": 1,
                "outcome": "succeeded",
                "abandoned": False,
                "leaf_index": v4.LEAF_INDEX,
            }
        ],
        "left_out": [
            {"trail_id": OPEN_TRAIL, "job_id": _job(10), "reason": matter_leaves.OPEN},
            {"trail_id": _trail(1), "job_id": _job(1), "reason": matter_leaves.NO_REQUEST},
            {"trail_id": _trail(3), "job_id": _job(3), "reason": matter_leaves.OUTSIDE},
        ],
    }
    return bundle.matter_bundle_bytes(
        matter=matter,
        trails=[trail],
        checkpoint_note=note,
        timestamp_token=None,
        verifier_key=log_verifier,
        receipt_signature=receipts.checkpoint_signature(log_private, v2.ORIGIN, merkle.root(data)),
    )


def write() -> None:
    zip_bytes = build()
    (HERE / "sample-matter-v3.zip").write_bytes(zip_bytes)
    for path, body in log_files().items():
        (LOG_DIR / path).parent.mkdir(parents=True, exist_ok=True)
        (LOG_DIR / path).write_bytes(body)
    digest = hashlib.sha256(zip_bytes).hexdigest()
    print(f"wrote the matter-format-3 sample ({len(zip_bytes)} bytes, SHA-256 {digest}) to {HERE}")


if __name__ == "__main__":
    write()

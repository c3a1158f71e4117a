"""Regenerate tests/data/receipt-golden.cbor and tests/data/receipt-golden.json: the RFC 9942
COSE Receipt of leaf 5 of a log of 7 leaves, signed with a log key made from a fixed seed. Run
only when the receipt's byte format changes on purpose (python -m tests.data.make_receipt_golden);
tests/unit/test_receipts.py fails until the committed files match.

The JSON holds the inputs (seed, key name, origin, leaves, index, subject) and what follows from
them (verifier key, key id, root, audit path, the receipt's hex), so that an outside tool can be
checked against the same bytes.
"""

import json
from pathlib import Path

from audit.evidence import checkpoints, merkle, receipts

HERE = Path(__file__).parent
SEED = bytes(range(32))
ORIGIN = "pathfinder.example/audit-log"
TRAIL_ID = "7f3e2d1c-0b9a-4876-9543-210fedcba987"
LEAVES = [f'{{"seq":{i},"trail":"golden-{i}"}}' for i in range(7)]
INDEX = 5


def build() -> tuple[bytes, dict]:
    private, verifier = checkpoints.generate_signing_key(ORIGIN, SEED)
    kid, key = receipts.signer_for_note_key(private)
    leaves = [leaf.encode("utf-8") for leaf in LEAVES]
    root = merkle.root(leaves)
    path = merkle.inclusion_proof(INDEX, leaves)
    receipt = receipts.encode_receipt(
        private_key=key,
        kid=kid,
        tree_size=len(leaves),
        leaf_index=INDEX,
        proof=path,
        root=root,
        issuer=ORIGIN,
        subject=TRAIL_ID,
    )
    vector = {
        "about": "RFC 9942 receipt (vds RFC9162_SHA256, EdDSA) of leaf `leaf_index`; "
        "tests/data/make_receipt_golden.py",
        "seed": SEED.hex(),
        "origin": ORIGIN,
        "subject": TRAIL_ID,
        "leaves": LEAVES,
        "leaf_index": INDEX,
        "tree_size": len(leaves),
        "log_verifier": verifier,
        "kid": kid.hex(),
        "root": root.hex(),
        "path": [p.hex() for p in path],
        "receipt": receipt.hex(),
    }
    return receipt, vector


def main() -> None:
    receipt, vector = build()
    (HERE / "receipt-golden.cbor").write_bytes(receipt)
    (HERE / "receipt-golden.json").write_text(json.dumps(vector, indent=2) + "\n", "utf-8")


if __name__ == "__main__":
    main()

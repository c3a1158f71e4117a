"""RFC 9942 COSE Receipts of a sealed trail's leaf (ADR 0030): the trail's inclusion in the newest
valid checkpoint covering it, signed with the log's checkpoint key, in a form SCITT tools check
without Pathfinder's verifier. The bytes are audit.evidence.receipts'; this reads the store."""

from __future__ import annotations

import uuid

from .evidence import checkpoints, receipts
from .keys import signing_key
from .log import NotYetCovered, inclusion_of
from .models import LedgerEntry

__all__ = ["NotYetCovered", "ReceiptFailed", "TrailNotSealed", "trail_receipt"]


class TrailNotSealed(Exception):
    """The trail has no leaf in the log (unknown, or still open): there is nothing to prove."""


class ReceiptFailed(Exception):
    """The receipt just made does not verify against the signed checkpoint: nothing is given
    out (fail closed)."""


def trail_receipt(trail_id: uuid.UUID | str) -> bytes:
    """The receipt of the trail's leaf in the newest valid checkpoint that covers it: issuer the
    checkpoint's origin, subject the trail id, signed by the log key (kid its signed-note key
    id). The same trail and checkpoint give the same bytes.

    Raises TrailNotSealed (no leaf), NotYetCovered (sealed after the newest checkpoint: beat
    signs one within PATHFINDER_CHECKPOINT_INTERVAL_S), SigningKeyMissing (not the host that
    signs checkpoints), ReceiptFailed (the stored proof does not lead to the signed root).
    """
    trail_id = uuid.UUID(str(trail_id))
    try:
        inclusion = inclusion_of(trail_id)
    except LedgerEntry.DoesNotExist as exc:
        raise TrailNotSealed(
            f"trail {trail_id} has no leaf in the log: it is unknown or still open"
        ) from exc
    kid, private = receipts.signer_for_note_key(signing_key().private)
    checkpoint = inclusion.checkpoint
    origin = checkpoints.parse_unverified(checkpoint.note).origin  # verified by inclusion_of
    root = bytes.fromhex(checkpoint.root_hash)
    leaf = inclusion.leaf_payload.encode("utf-8")
    receipt = receipts.encode_receipt(
        private_key=private,
        kid=kid,
        tree_size=checkpoint.tree_size,
        leaf_index=inclusion.leaf_index,
        proof=inclusion.proof,
        root=root,
        issuer=origin,
        subject=str(trail_id),
    )
    problems = receipts.receipt_problems(
        receipt,
        leaf=leaf,
        public_key=private.public_key(),
        root=root,
        tree_size=checkpoint.tree_size,
        leaf_index=inclusion.leaf_index,
        kid=kid,
        issuer=origin,
        subject=str(trail_id),
    )
    if problems:
        raise ReceiptFailed(
            f"the receipt of trail {trail_id} in checkpoint {checkpoint.id} does not verify "
            f"({'; '.join(problems)}): run verify_chain --all"
        )
    return receipt

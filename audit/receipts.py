"""RFC 9942 COSE Receipts of a sealed trail's leaf (ADR 0030): the trail's inclusion in the newest
valid checkpoint covering it, under the signature the log key made of that checkpoint's root, in
a form SCITT tools check without Pathfinder's verifier. The bytes are audit.evidence.receipts';
this reads the store."""

from __future__ import annotations

import uuid

from .evidence import checkpoints, receipts
from .keys import SigningKeyMissing, signer_of, signing_key
from .log import NotYetCovered, inclusion_of
from .models import Checkpoint, LedgerEntry

__all__ = ["NotYetCovered", "ReceiptFailed", "TrailNotSealed", "trail_receipt"]


class TrailNotSealed(Exception):
    """The trail has no leaf in the log (unknown, or still open): there is nothing to prove."""


class ReceiptFailed(Exception):
    """The receipt just made does not verify against the signed checkpoint: nothing is given
    out (fail closed)."""


def receipt_signature(checkpoint: Checkpoint, *, sign: bool) -> bytes | None:
    """The log key's signature of the checkpoint's root for its receipts: the one it keeps, or
    for a checkpoint signed before receipts one made now where this host holds the key (with
    `sign`, SigningKeyMissing elsewhere; without, None elsewhere)."""
    if checkpoint.receipt_signature:
        return bytes(checkpoint.receipt_signature)
    try:
        key = signing_key()
    except SigningKeyMissing:
        if sign:
            raise
        return None
    origin = checkpoints.parse_unverified(checkpoint.note).origin
    return receipts.checkpoint_signature(key.private, origin, bytes.fromhex(checkpoint.root_hash))


def trail_receipt(trail_id: uuid.UUID | str) -> bytes:
    """The receipt of the trail's leaf in the newest valid checkpoint that covers it: issuer the
    checkpoint's origin, signed by the log key (kid its signed-note key id). The signature is
    the one the checkpoint keeps (made when it was signed), so any host gives receipts out;
    for a checkpoint signed before receipts, only the host with the key can, signing it now.
    The same trail and checkpoint give the same bytes.

    Raises TrailNotSealed (no leaf), NotYetCovered (sealed after the newest checkpoint: beat
    signs one within PATHFINDER_CHECKPOINT_INTERVAL_S), SigningKeyMissing (an older checkpoint,
    and not the host that signs them), ReceiptFailed (what is stored does not lead to the
    signed root).
    """
    trail_id = uuid.UUID(str(trail_id))
    try:
        inclusion = inclusion_of(trail_id)
    except LedgerEntry.DoesNotExist as exc:
        raise TrailNotSealed(
            f"trail {trail_id} has no leaf in the log: it is unknown or still open"
        ) from exc
    checkpoint = inclusion.checkpoint
    origin = checkpoints.parse_unverified(checkpoint.note).origin  # verified by inclusion_of
    root = bytes.fromhex(checkpoint.root_hash)
    kid, public = receipts.key_for_verifier(signer_of(checkpoint.note))
    signature = receipt_signature(checkpoint, sign=True)
    receipt = receipts.assemble_receipt(
        protected=receipts.receipt_protected(kid=kid, issuer=origin),
        signature=bytes(signature),
        tree_size=checkpoint.tree_size,
        leaf_index=inclusion.leaf_index,
        proof=inclusion.proof,
    )
    problems = receipts.receipt_problems(
        receipt,
        leaf=inclusion.leaf_payload.encode("utf-8"),
        public_key=public,
        root=root,
        tree_size=checkpoint.tree_size,
        leaf_index=inclusion.leaf_index,
        kid=kid,
        issuer=origin,
    )
    if problems:
        raise ReceiptFailed(
            f"the receipt of trail {trail_id} in checkpoint {checkpoint.id} does not verify "
            f"({'; '.join(problems)}): run verify_chain --all"
        )
    return receipt

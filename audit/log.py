"""The global log: sealed trails' ledger entries as leaves of an RFC 6962 Merkle tree, with
signed checkpoints of its size and root that leave the database.

A checkpoint is signed where the signing key is (beat, manage.py checkpoint), sent to the
witnesses with a consistency proof, timestamped by an RFC 3161 authority when one is set, stored,
and published outside the database. Everything else only reads checkpoints and verifies them.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass

from django.conf import settings
from django.db import transaction

from . import tiles, witnessing
from .evidence import checkpoints, merkle, receipts, timestamps
from .evidence.tile_math import LogIncomplete
from .keys import signing_key, verifier_keys, verify_note
from .models import Checkpoint, LedgerEntry
from .publish import publish

logger = logging.getLogger(__name__)


class NotYetCovered(Exception):
    """No signed checkpoint covers this trail's leaf yet (beat signs one soon after a seal)."""


class LogInconsistent(Exception):
    """The log as stored is not an extension of the last signed checkpoint: refuse to sign."""


def log_size() -> int:
    last = LedgerEntry.objects.order_by("-seq").values_list("seq", flat=True).first()
    return 0 if last is None else last + 1


def latest_checkpoint(log_size: int, *, covering: int = 0) -> Checkpoint | None:
    """The newest checkpoint that is validly signed, agrees with its row and is no larger than
    the log (a row written by hand, or one larger than the log, is never trusted), among those
    of at least `covering` leaves."""
    candidates = Checkpoint.objects.filter(tree_size__gte=covering, tree_size__lte=log_size)
    keys = None
    for checkpoint in candidates.order_by("-id").iterator(chunk_size=100):
        keys = keys or verifier_keys()  # read once, and only if there is a row to check
        try:
            signed = verify_note(checkpoint.note, keys)
        except checkpoints.CheckpointError:
            continue
        if (signed.size, signed.root.hex()) == (checkpoint.tree_size, checkpoint.root_hash):
            return checkpoint
    return None


def checkpoint_create() -> Checkpoint:
    """Sign the log as it stands, have it cosigned and timestamped, store and publish it. An
    unchanged log keeps (and re-publishes, if that was missed) its latest checkpoint.

    Raises SigningKeyMissing where there is no key, PublishConflict when another checkpoint of
    this size was published before (a fork), LogInconsistent when the tree as stored does not
    extend the last signed one (a rewrite is never signed); a witness or authority that is
    down only lowers what the checkpoint carries, and raises the alert.
    """
    size = log_size()
    latest = latest_checkpoint(size, covering=size)
    if latest is None:
        tree = tiles.Tiles(size)
        try:
            tiles.tiles_extend(size)
            root = tree.root()
            _check_extends_last_signed(tree, root)
        except LogIncomplete as exc:
            raise LogInconsistent(f"{exc}: run verify_chain --all") from exc
        key = signing_key().private
        note = checkpoints.sign_checkpoint(settings.PATHFINDER_LOG_ORIGIN, size, root, key)
        receipt_signature = receipts.checkpoint_signature(key, settings.PATHFINDER_LOG_ORIGIN, root)
        note = _cosigned(note, tree)
        token = _timestamp(note)
        with transaction.atomic():
            latest = Checkpoint.objects.create(
                tree_size=size,
                root_hash=root.hex(),
                note=note,
                timestamp_token=token,
                receipt_signature=receipt_signature,
            )
    publish(latest.tree_size, latest.note, latest.timestamp_token)
    return latest


def configured_witnesses() -> list[witnessing.Witness]:
    return [witnessing.Witness.parse(spec) for spec in settings.PATHFINDER_WITNESSES]


def _check_extends_last_signed(tree: tiles.Tiles, root: bytes) -> None:
    """Before signing: the tree proves consistent with the newest checkpoint signed before it
    (from the same tiles, so a stored tile or leaf rewritten since is caught here)."""
    previous = latest_checkpoint(tree.size)
    if previous is None or previous.tree_size == tree.size:
        return
    old_root = bytes.fromhex(previous.root_hash)
    proof = tree.consistency_proof(previous.tree_size)
    if not merkle.verify_consistency(previous.tree_size, tree.size, old_root, root, proof):
        logger.error(
            "the log does not extend its last signed checkpoint; nothing signed",
            extra={"checkpoint": previous.id, "size": tree.size},
        )
        raise LogInconsistent(
            f"the log of {tree.size} leaves is not consistent with checkpoint {previous.id} "
            f"(size {previous.tree_size}): run verify_chain --all"
        )


def _cosigned(note: str, tree: tiles.Tiles) -> str:
    """The note with every cosignature the configured witnesses gave."""
    witnesses = configured_witnesses()
    if not witnesses:
        return note
    size = tree.size

    def proof_from(old_size: int) -> list[bytes] | None:
        if old_size > size:
            return None  # the witness saw a larger log than this one: a rollback
        return tree.consistency_proof(old_size)

    lines = []
    for witness in witnesses:
        answer = witnessing.ask(
            witness,
            note,
            _last_cosigned_size(witness),
            proof_from,
            timeout=settings.PATHFINDER_WITNESS_TIMEOUT_S,
        )
        if answer.line is None:
            logger.error(
                "a witness did not cosign the checkpoint",
                extra={"witness": witness.name, "size": size, "error": answer.error},
            )
        else:
            lines.append(answer.line)
    if len(lines) < settings.PATHFINDER_WITNESS_QUORUM:
        # The alert itself is /readyz and the metric, both read from the stored checkpoint.
        logger.error(
            "checkpoint below the witness quorum",
            extra={
                "size": size,
                "cosigned": len(lines),
                "quorum": settings.PATHFINDER_WITNESS_QUORUM,
            },
        )
    return checkpoints.with_signature_lines(note, lines)


def _last_cosigned_size(witness: witnessing.Witness) -> int:
    """The size of the newest stored checkpoint this witness cosigned (0 if none): where the
    consistency proof it needs starts. A witness that knows better answers 409 with its own."""
    for checkpoint in Checkpoint.objects.order_by("-id").only("tree_size", "note")[:50]:
        try:
            if checkpoints.cosignatures(checkpoint.note, [witness.verifier]):
                return checkpoint.tree_size
        except checkpoints.CheckpointError:
            continue
    return 0


def _timestamp(note: str) -> bytes | None:
    if not settings.PATHFINDER_TSA_URL:
        return None
    try:
        return timestamps.timestamp(
            settings.PATHFINDER_TSA_URL,
            note.encode("utf-8"),
            timeout=settings.PATHFINDER_WITNESS_TIMEOUT_S,
        )
    except timestamps.TimestampError as exc:
        logger.error("the checkpoint was not timestamped", extra={"error": str(exc)})
        return None


@dataclass(frozen=True)
class WitnessStatus:
    cosigned: int
    quorum: int
    error: str = ""  # a configured witness's cosignature line that does not verify

    @property
    def ok(self) -> bool:
        return not self.error and self.cosigned >= self.quorum


def witness_status(checkpoint: Checkpoint) -> WitnessStatus:
    """How many of the configured witnesses validly cosigned this checkpoint, against the
    quorum."""
    keys = [witness.verifier for witness in configured_witnesses()]
    quorum = settings.PATHFINDER_WITNESS_QUORUM
    try:
        cosigned = len(checkpoints.cosignatures(checkpoint.note, keys)) if keys else 0
    except checkpoints.CheckpointError as exc:
        return WitnessStatus(0, quorum, str(exc))
    return WitnessStatus(cosigned, quorum)


def checkpoint_covering(entry: LedgerEntry) -> Checkpoint:
    """The newest valid checkpoint that covers a sealed leaf; NotYetCovered when none does."""
    checkpoint = latest_checkpoint(log_size(), covering=entry.seq + 1)
    if checkpoint is None:
        interval = settings.PATHFINDER_CHECKPOINT_INTERVAL_S
        raise NotYetCovered(
            f"trail {entry.trail_id} was sealed after the newest signed checkpoint; beat signs "
            f"one within PATHFINDER_CHECKPOINT_INTERVAL_S ({interval} s): try again then"
        )
    return checkpoint


@dataclass(frozen=True)
class Inclusion:
    leaf_index: int
    leaf_payload: str
    proof: list[bytes]
    checkpoint: Checkpoint


def inclusion_of(trail_id: uuid.UUID) -> Inclusion:
    """A proof that the trail's sealed leaf is in the newest valid checkpoint covering it."""
    entry = LedgerEntry.objects.get(trail_id=trail_id)
    checkpoint = checkpoint_covering(entry)
    return Inclusion(
        leaf_index=entry.seq,
        leaf_payload=entry.payload,
        proof=tiles.Tiles(checkpoint.tree_size).inclusion_proof(entry.seq),
        checkpoint=checkpoint,
    )


def checkpoint_failures(all_leaves: list[bytes]) -> list[str]:
    """Check every stored checkpoint: its signature, its configured witnesses' cosignatures (a
    line of theirs that does not verify), its row, its root against the leaves. Two
    checkpoints whose roots both match the log's prefixes are consistent with each other, so
    the log only ever grew; the leaves are hashed once for all of them. Then every stored tile
    against the leaves."""
    failures: list[str] = []
    claims = []
    witness_keys = [witness.verifier for witness in configured_witnesses()]
    keys = None
    for checkpoint in Checkpoint.objects.order_by("id").iterator():
        label = f"checkpoint {checkpoint.id} (size {checkpoint.tree_size})"
        keys = keys or verifier_keys()
        try:
            signed = verify_note(checkpoint.note, keys)
            checkpoints.cosignatures(checkpoint.note, witness_keys)
        except checkpoints.CheckpointError as exc:
            failures.append(f"{label}: {exc}")
            continue
        if (signed.size, signed.root.hex()) != (checkpoint.tree_size, checkpoint.root_hash):
            failures.append(f"{label}: the signed note differs from the stored size or root")
        if signed.size > len(all_leaves):
            failures.append(f"{label}: signs {signed.size} leaves, the log has {len(all_leaves)}")
        else:
            claims.append((label, signed))
    roots = merkle.roots_at(all_leaves, [signed.size for _, signed in claims])
    for label, signed in claims:
        if roots[signed.size] != signed.root:
            failures.append(f"{label}: the log's leaves no longer hash to the signed root")
    return failures + tiles.tile_failures(all_leaves)

"""The global log: sealed trails' ledger entries as leaves of an RFC 6962 Merkle tree, with
signed checkpoints of its size and root that are meant to leave the database."""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass

from django.conf import settings
from django.db import transaction

from . import checkpoints, merkle
from .models import Checkpoint, LedgerEntry


@dataclass(frozen=True)
class SigningKey:
    private: str  # C2SP signed-note private key string
    verifier: str  # what auditors pin: name+keyid+base64 public key


def signing_key() -> SigningKey:
    """The deployment's checkpoint key, created (mode 0600) the first time it is needed."""
    path = settings.PATHFINDER_CHECKPOINT_KEY_FILE
    if not path.exists():
        private, verifier = checkpoints.generate_signing_key(settings.PATHFINDER_LOG_ORIGIN)
        path.parent.mkdir(parents=True, exist_ok=True)
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "w", encoding="ascii") as handle:
            handle.write(f"{private}\n{verifier}\n")
    private, verifier = path.read_text(encoding="ascii").split()
    return SigningKey(private, verifier)


def verifier_key() -> str:
    """The log's verifier key, which every check of a checkpoint uses."""
    return signing_key().verifier


def latest_checkpoint(log_size: int, *, covering: int = 0) -> Checkpoint | None:
    """The newest checkpoint that is validly signed, agrees with its row and is no larger than
    the log (a row written by hand, or one larger than the log, is never trusted), among those
    of at least `covering` leaves."""
    verifier = verifier_key()
    candidates = Checkpoint.objects.filter(tree_size__gte=covering, tree_size__lte=log_size)
    for checkpoint in candidates.order_by("-id").iterator(chunk_size=100):
        try:
            signed = checkpoints.parse_and_verify(checkpoint.note, verifier)
        except checkpoints.CheckpointError:
            continue
        if (signed.size, signed.root.hex()) == (checkpoint.tree_size, checkpoint.root_hash):
            return checkpoint
    return None


def leaves() -> list[bytes]:
    """Every leaf of the log, in ledger order (leaf index == ledger seq)."""
    payloads = LedgerEntry.objects.order_by("seq").values_list("payload", flat=True)
    return [payload.encode("utf-8") for payload in payloads.iterator(chunk_size=2000)]


def checkpoint_create() -> Checkpoint:
    """Sign the log as it stands. An unchanged log keeps its latest checkpoint."""
    with transaction.atomic():
        all_leaves = leaves()
        latest = latest_checkpoint(len(all_leaves), covering=len(all_leaves))
        if latest is not None:
            return latest
        root = merkle.root(all_leaves)
        note = checkpoints.sign_checkpoint(
            settings.PATHFINDER_LOG_ORIGIN, len(all_leaves), root, signing_key().private
        )
        return Checkpoint.objects.create(tree_size=len(all_leaves), root_hash=root.hex(), note=note)


def checkpoint_covering(entry: LedgerEntry) -> Checkpoint:
    """The newest valid checkpoint that covers a sealed leaf, signing one if none does yet."""
    log_size = LedgerEntry.objects.count()
    checkpoint = latest_checkpoint(log_size, covering=entry.seq + 1)
    return checkpoint if checkpoint is not None else checkpoint_create()


@dataclass(frozen=True)
class Inclusion:
    leaf_index: int
    leaf_payload: str
    proof: list[bytes]
    checkpoint: Checkpoint


def inclusion_of(trail_id: uuid.UUID) -> Inclusion:
    """A proof that the trail's sealed leaf is in the latest valid checkpoint (signing a new
    one when none covers the leaf yet)."""
    entry = LedgerEntry.objects.get(trail_id=trail_id)
    all_leaves = leaves()
    checkpoint = checkpoint_covering(entry)
    covered = all_leaves[: checkpoint.tree_size]
    return Inclusion(
        leaf_index=entry.seq,
        leaf_payload=entry.payload,
        proof=merkle.inclusion_proof(entry.seq, covered),
        checkpoint=checkpoint,
    )


def checkpoint_failures(all_leaves: list[bytes]) -> list[str]:
    """Check every stored checkpoint: its signature, its root against the leaves, and that each
    is consistent with the one before it (the log only ever grew)."""
    failures: list[str] = []
    verifier = verifier_key()
    previous: Checkpoint | None = None
    for checkpoint in Checkpoint.objects.order_by("id").iterator():
        label = f"checkpoint {checkpoint.id} (size {checkpoint.tree_size})"
        try:
            signed = checkpoints.parse_and_verify(checkpoint.note, verifier)
        except checkpoints.CheckpointError as exc:
            failures.append(f"{label}: {exc}")
            continue
        if (signed.size, signed.root.hex()) != (checkpoint.tree_size, checkpoint.root_hash):
            failures.append(f"{label}: the signed note differs from the stored size or root")
        if signed.size > len(all_leaves):
            failures.append(f"{label}: signs {signed.size} leaves, the log has {len(all_leaves)}")
        elif merkle.root(all_leaves[: signed.size]) != signed.root:
            failures.append(f"{label}: the log's leaves no longer hash to the signed root")
        if previous is not None:
            if signed.size < previous.tree_size:
                failures.append(f"{label}: smaller than checkpoint {previous.id}: the log shrank")
            elif signed.size <= len(all_leaves):
                proof = merkle.consistency_proof(previous.tree_size, all_leaves[: signed.size])
                consistent = merkle.verify_consistency(
                    previous.tree_size,
                    signed.size,
                    bytes.fromhex(previous.root_hash),
                    signed.root,
                    proof,
                )
                if not consistent:
                    failures.append(f"{label}: not consistent with checkpoint {previous.id}")
        previous = checkpoint
    return failures

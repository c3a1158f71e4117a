"""Write a Pathfinder evidence bundle: one trail, its ledger leaf, the leaf's inclusion proof, a
signed checkpoint and the question and answer the trail binds, as a deterministic zip that
`python -m audit.offline_verify` checks offline.

Pure Python (no Django): the caller (audit.export) gathers the rows; this module only lays out
bytes. The layout itself (member names and order, the zip packing, the JSON forms) is
audit.evidence.bundle_format's, shared with the verifier. docs/audit-format.md specifies every
member.
"""

from __future__ import annotations

import hashlib
import io
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from audit.evidence import chain, checkpoints, descriptive, merkle, receipts
from audit.evidence.bundle_format import (
    ANSWER,
    CHAIN,
    CHECKPOINT,
    DESTRUCTION,
    DISCLOSURES,
    INCLUSION_PROOF,
    LEDGER_LEAF,
    MANIFEST,
    MATTER,
    MEMBER_NAMES,
    MODELS,
    PARAMS,
    PROMPT,
    README,
    RECEIPT,
    RECORDS,
    REPORT,
    SIGNED_MEMBERS,
    TIMESTAMP,
    TRAIL_MEMBERS,
    VERIFICATION,
    VERIFIER_KEY,
    DeterministicZip,
    destruction_statement,
    deterministic_zip,
    json_member,
    manifest_member,
    manifest_of,
    trail_member,
)
from audit.evidence.trail_facts import NO_TEXTS, Texts  # noqa: F401 (callers name bundle.NO_TEXTS)

BundleRecord = tuple[int, str, str, str]  # (seq, prev_hash, record_hash, payload_text)


@dataclass(frozen=True)
class TrailEvidence:
    """One sealed trail as a bundle carries it: its records, its ledger leaf, the leaf's proof
    against the bundle's checkpoint, the texts it discloses and what its records describe."""

    records: Sequence[BundleRecord]
    trail_id: str
    format_version: int
    ledger_index: int
    ledger_payload: str
    proof: Sequence[bytes]
    texts: Texts
    models: dict
    params: dict
    # When its texts were destroyed: {"destroyed_at", "destroyed_by", "order"}; None if never.
    destruction: dict | None = None


@dataclass(frozen=True)
class ReceiptSeal:
    """What every trail's receipt under one checkpoint shares: the protected header (the log
    key's id, the log as issuer) and the log key's signature of the checkpoint's root under it
    (Checkpoint.receipt_signature). None where the checkpoint was signed before receipts."""

    protected: bytes
    signature: bytes


def receipt_seal(
    *, checkpoint_note: str, verifier_key: str, signature: bytes | None
) -> ReceiptSeal | None:
    """The seal of a checkpoint's receipts, from its note, the log's key and the stored
    signature (None: no receipts under this checkpoint)."""
    if not signature:
        return None
    kid, _ = receipts.key_for_verifier(verifier_key.strip())
    origin = checkpoints.parse_unverified(checkpoint_note).origin
    return ReceiptSeal(receipts.receipt_protected(kid=kid, issuer=origin), bytes(signature))


def trail_members(
    trail: TrailEvidence, *, tree_size: int, seal: ReceiptSeal | None
) -> dict[str, bytes]:
    """The members that describe one trail (records, chain, leaf, proof, texts, models and
    parameters, its receipt and whether its texts were destroyed), under their names in a
    one-trail bundle."""
    records = [tuple(r) for r in trail.records]  # any 4-sequences (e.g. values_list rows)
    lines = []
    for seq, _prev, _hash, payload in records:
        if "\n" in payload:
            raise ValueError(f"record seq {seq}: a stored payload cannot contain a newline")
        lines.append(payload + "\n")
    if any(len(p) != merkle.HASH_SIZE for p in trail.proof):
        raise ValueError("inclusion proof elements must be 32-byte hashes")
    if not isinstance(trail.models, dict) or not isinstance(trail.params, dict):
        raise TypeError("models and params must be JSON objects (dicts)")
    genesis = chain.genesis_hash(trail.trail_id)
    chain_doc = {
        "format_version": trail.format_version,
        "trail_id": trail.trail_id,
        "genesis_hash": genesis,
        "records": [
            {"seq": seq, "prev_hash": prev, "record_hash": rh} for seq, prev, rh, _ in records
        ],
        "head_hash": records[-1][2] if records else genesis,
        "record_count": len(records),
    }
    index, payload = trail.ledger_index, trail.ledger_payload
    return {
        RECORDS: "".join(lines).encode("utf-8"),
        CHAIN: json_member(chain_doc),
        LEDGER_LEAF: json_member({"index": index, "payload": payload}),
        INCLUSION_PROOF: json_member(
            {
                "leaf_index": index,
                "tree_size": tree_size,
                "proof": [bytes(p).hex() for p in trail.proof],
                "leaf_hash": merkle.leaf_hash(payload.encode("utf-8")).hex(),
            }
        ),
        DISCLOSURES: json_member(trail.texts.disclosures),
        PROMPT: trail.texts.prompt.encode("utf-8"),
        ANSWER: trail.texts.answer.encode("utf-8"),
        MODELS: json_member(trail.models),
        PARAMS: json_member(trail.params),
        RECEIPT: b""
        if seal is None
        else receipts.assemble_receipt(
            protected=seal.protected,
            signature=seal.signature,
            tree_size=tree_size,
            leaf_index=index,
            proof=trail.proof,
        ),
        DESTRUCTION: json_member(destruction_statement(trail.destruction)),
    }


def signed_members(
    *, checkpoint_note: str, timestamp_token: bytes | None, verifier_key: str
) -> dict[str, bytes]:
    """The checkpoint every proof in the bundle leads to, its timestamp and the log's key."""
    if "\n" in verifier_key.strip():
        raise ValueError("verifier key must be one line")
    return {
        CHECKPOINT: checkpoint_note.encode("utf-8"),
        TIMESTAMP: bytes(timestamp_token or b""),
        VERIFIER_KEY: (verifier_key.strip() + "\n").encode("ascii"),
    }


def bundle_bytes(
    *,
    records: Sequence[BundleRecord],
    trail_id: str,
    format_version: int,
    ledger_index: int,
    ledger_payload: str,
    proof: Sequence[bytes],
    tree_size: int,
    checkpoint_note: str,
    timestamp_token: bytes | None = None,
    verifier_key: str,
    texts: Texts,
    models: dict,
    params: dict,
    receipt_signature: bytes | None = None,
    destruction: dict | None = None,
) -> bytes:
    """The bundle's zip bytes (bundle format 6). Writes what it is given, then README.txt,
    verification.txt and report.pdf made from it (audit.evidence.descriptive); verifying it is the
    verifier's job. `receipt_signature` is the checkpoint's (receipt_seal); `destruction`,
    TrailEvidence's."""
    trail = TrailEvidence(
        records,
        trail_id,
        format_version,
        ledger_index,
        ledger_payload,
        proof,
        texts,
        models,
        params,
        destruction,
    )
    seal = receipt_seal(
        checkpoint_note=checkpoint_note, verifier_key=verifier_key, signature=receipt_signature
    )
    members = {
        **trail_members(trail, tree_size=tree_size, seal=seal),
        **signed_members(
            checkpoint_note=checkpoint_note,
            timestamp_token=timestamp_token,
            verifier_key=verifier_key,
        ),
    }
    members.update(descriptive.trail_descriptive(members))
    ordered = [(name, members[name]) for name in MEMBER_NAMES if name != MANIFEST]
    return deterministic_zip(ordered + [(MANIFEST, manifest_member(ordered))])


def matter_bundle_bytes(
    *,
    matter: dict,
    trails: Sequence[TrailEvidence],
    checkpoint_note: str,
    timestamp_token: bytes | None,
    verifier_key: str,
    receipt_signature: bytes | None = None,
) -> bytes:
    """A matter bundle's zip bytes, in memory (write_matter_bundle's, for small bundles)."""
    out = io.BytesIO()
    write_matter_zip(
        out,
        matter=matter,
        trails=trails,
        checkpoint_note=checkpoint_note,
        timestamp_token=timestamp_token,
        verifier_key=verifier_key,
        receipt_signature=receipt_signature,
    )
    return out.getvalue()


def write_matter_bundle(path: str | os.PathLike, **fields) -> str:
    """Write a matter bundle (write_matter_zip's keyword fields) to `path`, atomically, a trail
    at a time; return the SHA-256 hex of the zip, for the custody log."""
    path = Path(path)
    tmp = path.with_name(path.name + ".partial")
    try:
        with open(tmp, "wb") as file:
            hashed = _Hashed(file)
            write_matter_zip(hashed, **fields)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return hashed.sha256.hexdigest()


def write_matter_zip(
    out: BinaryIO,
    *,
    matter: dict,
    trails: Iterable[TrailEvidence],
    checkpoint_note: str,
    timestamp_token: bytes | None,
    verifier_key: str,
    receipt_signature: bytes | None = None,
) -> None:
    """A matter bundle to `out`, each trail's members written as `trails` yields it (only its
    facts are kept, for the report): matter.json (which lists the trails, in the order `trails`
    gives them), the signed members, each trail's members under trails/<id>/, the report and
    the texts made from them (audit.evidence.descriptive), the manifest
    (bundle_format.matter_member_names gives the order)."""
    head = {
        MATTER: json_member(matter),
        **signed_members(
            checkpoint_note=checkpoint_note,
            timestamp_token=timestamp_token,
            verifier_key=verifier_key,
        ),
    }
    packed = DeterministicZip(out)
    for name in (MATTER, *SIGNED_MEMBERS):
        packed.add(name, head[name])
    seal = receipt_seal(
        checkpoint_note=checkpoint_note, verifier_key=verifier_key, signature=receipt_signature
    )
    listed = iter(entry["trail_id"] for entry in matter["trails"])
    facts = []
    for trail in trails:
        if next(listed, None) != trail.trail_id:
            raise ValueError("matter.json must list exactly the trails given, in their order")
        members = trail_members(trail, tree_size=matter["tree_size"], seal=seal)
        for name in TRAIL_MEMBERS:
            packed.add(trail_member(trail.trail_id, name), members[name])
        facts.append(descriptive.trail_facts(members))
    if next(listed, None) is not None:
        raise ValueError("matter.json must list exactly the trails given, in their order")
    made = descriptive.matter_descriptive_of(head, facts)
    for name in (REPORT, VERIFICATION, README):
        packed.add(name, made[name])
    packed.add(MANIFEST, manifest_of(packed.digests))
    packed.finish()


class _Hashed:
    """A binary file that keeps the SHA-256 of what is written to it."""

    def __init__(self, file: BinaryIO):
        self._file = file
        self.sha256 = hashlib.sha256()

    def write(self, data: bytes) -> int:
        self.sha256.update(data)
        return self._file.write(data)


def write_bundle(path_or_file: str | os.PathLike | BinaryIO, **fields) -> str:
    """Write the bundle (bundle_bytes' keyword fields) to a path (atomically) or a binary file
    object; return the SHA-256 hex of the zip, for the custody log."""
    return write_zip(path_or_file, bundle_bytes(**fields))


def write_zip(path_or_file: str | os.PathLike | BinaryIO, data: bytes) -> str:
    """Write a bundle's bytes to a path (atomically) or a binary file object; return their
    SHA-256 hex, for the custody log."""
    if hasattr(path_or_file, "write"):
        path_or_file.write(data)
    else:
        path = Path(path_or_file)
        tmp = path.with_name(path.name + ".partial")
        tmp.write_bytes(data)
        os.replace(tmp, path)
    return hashlib.sha256(data).hexdigest()

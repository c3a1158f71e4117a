"""Write a Pathfinder evidence bundle: one trail, its ledger leaf, the leaf's inclusion proof, a
signed checkpoint and the question and answer the trail binds, as a deterministic zip that
`python -m audit.offline_verify` checks offline.

Pure Python (no Django): the caller (audit.export) gathers the rows; this module only lays out
bytes. The layout itself (member names and order, the zip packing, the JSON forms) is
audit.bundle_format's, shared with the verifier. docs/audit-format.md specifies every member.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from audit import chain, merkle
from audit.bundle_format import (
    ANSWER,
    CHAIN,
    CHECKPOINT,
    DISCLOSURES,
    INCLUSION_PROOF,
    LEDGER_LEAF,
    MANIFEST,
    MEMBER_NAMES,
    MODELS,
    PARAMS,
    PROMPT,
    README,
    RECORDS,
    TIMESTAMP,
    VERIFICATION,
    VERIFIER_KEY,
    deterministic_zip,
    json_member,
    manifest_member,
)

BundleRecord = tuple[int, str, str, str]  # (seq, prev_hash, record_hash, payload_text)


@dataclass(frozen=True)
class Texts:
    """The bound texts a bundle discloses: `disclosures` is disclosures.json's object (per bound
    field, its salt and, for fields without a member of their own, its value; or withheld), and
    prompt and answer are prompt.txt and answer.txt ("" when withheld)."""

    disclosures: dict
    prompt: str = ""
    answer: str = ""


NO_TEXTS = Texts({})  # a v1 trail binds none


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
    verification_text: str,
    readme_text: str,
) -> bytes:
    """The bundle's zip bytes. Writes what it is given; verifying it is the verifier's job."""
    records = [tuple(r) for r in records]  # any sequence of 4-sequences (e.g. values_list rows)
    lines = []
    for seq, _prev, _hash, payload in records:
        if "\n" in payload:
            raise ValueError(f"record seq {seq}: a stored payload cannot contain a newline")
        lines.append(payload + "\n")
    if any(len(p) != merkle.HASH_SIZE for p in proof):
        raise ValueError("inclusion proof elements must be 32-byte hashes")
    if not isinstance(models, dict) or not isinstance(params, dict):
        raise TypeError("models and params must be JSON objects (dicts)")
    if "\n" in verifier_key.strip():
        raise ValueError("verifier key must be one line")
    genesis = chain.genesis_hash(trail_id)
    chain_doc = {
        "format_version": format_version,
        "trail_id": trail_id,
        "genesis_hash": genesis,
        "records": [
            {"seq": seq, "prev_hash": prev, "record_hash": rh} for seq, prev, rh, _ in records
        ],
        "head_hash": records[-1][2] if records else genesis,
        "record_count": len(records),
    }
    members = {
        RECORDS: "".join(lines).encode("utf-8"),
        CHAIN: json_member(chain_doc),
        LEDGER_LEAF: json_member({"index": ledger_index, "payload": ledger_payload}),
        INCLUSION_PROOF: json_member(
            {
                "leaf_index": ledger_index,
                "tree_size": tree_size,
                "proof": [bytes(p).hex() for p in proof],
                "leaf_hash": merkle.leaf_hash(ledger_payload.encode("utf-8")).hex(),
            }
        ),
        CHECKPOINT: checkpoint_note.encode("utf-8"),
        TIMESTAMP: bytes(timestamp_token or b""),
        VERIFIER_KEY: (verifier_key.strip() + "\n").encode("ascii"),
        DISCLOSURES: json_member(texts.disclosures),
        PROMPT: texts.prompt.encode("utf-8"),
        ANSWER: texts.answer.encode("utf-8"),
        MODELS: json_member(models),
        PARAMS: json_member(params),
        VERIFICATION: verification_text.encode("utf-8"),
        README: readme_text.encode("utf-8"),
    }
    ordered = [(name, members[name]) for name in MEMBER_NAMES if name != MANIFEST]
    return deterministic_zip(ordered + [(MANIFEST, manifest_member(ordered))])


def write_bundle(path_or_file: str | os.PathLike | BinaryIO, **fields) -> str:
    """Write the bundle (bundle_bytes' keyword fields) to a path (atomically) or a binary file
    object; return the SHA-256 hex of the zip, for the custody log."""
    data = bundle_bytes(**fields)
    if hasattr(path_or_file, "write"):
        path_or_file.write(data)
    else:
        path = Path(path_or_file)
        tmp = path.with_name(path.name + ".partial")
        tmp.write_bytes(data)
        os.replace(tmp, path)
    return hashlib.sha256(data).hexdigest()

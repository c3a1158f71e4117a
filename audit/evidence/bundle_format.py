"""The evidence bundle's byte layout: member names and order, size limits, the deterministic zip
packing and the JSON forms. audit.evidence.bundle writes bundles with it and
audit.evidence.offline_verify checks
them with it, so writer and verifier cannot drift apart. docs/audit-format.md specifies it.

Pure Python (standard library and audit.evidence.chain only), like the verifier.
"""

from __future__ import annotations

import hashlib
import io
import json
import struct
import zipfile
import zlib
from collections.abc import Sequence
from typing import BinaryIO

from audit.evidence import chain

# 3: a one-trail bundle carries report.pdf; 2 (without it) still verifies.
# 4: README.txt, verification.txt and report.pdf are made from the other members
# (audit.evidence.descriptive) and verifiers require them byte for byte; 2 and 3 did not prove them.
# 5: the texts name as the checkpoint's signer only the key in verifier-key.txt, which a verifier
# checks; other signature lines are named as verified only by a pinned --witness-key.
# 6: each trail carries receipt.cose (its RFC 9942 COSE receipt under the checkpoint, empty for a
# checkpoint signed before receipts) and destruction.json (whether its texts were destroyed, when
# and under what order); the texts name who directed the job.
BUNDLE_FORMAT_VERSION = 6
PROVEN_DESCRIPTIVE_SINCE = 4
NAMED_SIGNERS_SINCE = 5
RECEIPTS_SINCE = 6
RECORDS = "records.jsonl"
CHAIN = "chain.json"
LEDGER_LEAF = "ledger-leaf.json"
INCLUSION_PROOF = "inclusion-proof.json"
CHECKPOINT = "checkpoint.txt"
TIMESTAMP = "checkpoint.tsr"
VERIFIER_KEY = "verifier-key.txt"
DISCLOSURES = "disclosures.json"
PROMPT = "prompt.txt"
ANSWER = "answer.txt"
MODELS = "models.json"
PARAMS = "params.json"
RECEIPT = "receipt.cose"
DESTRUCTION = "destruction.json"
VERIFICATION = "verification.txt"
README = "README.txt"
MANIFEST = "manifest.json"
MATTER = "matter.json"
REPORT = "report.pdf"
MEMBER_NAMES = (
    RECORDS,
    CHAIN,
    LEDGER_LEAF,
    INCLUSION_PROOF,
    CHECKPOINT,
    TIMESTAMP,
    VERIFIER_KEY,
    DISCLOSURES,
    PROMPT,
    ANSWER,
    MODELS,
    PARAMS,
    RECEIPT,
    DESTRUCTION,
    REPORT,
    VERIFICATION,
    README,
    MANIFEST,
)
# Formats 3 to 5 had neither receipt nor destruction; format 2, no report either.
MEMBER_NAMES_V5 = tuple(name for name in MEMBER_NAMES if name not in (RECEIPT, DESTRUCTION))
MEMBER_NAMES_V2 = tuple(name for name in MEMBER_NAMES_V5 if name != REPORT)


# A matter bundle: many trails of one matter under one checkpoint. Its own members, in order:
# matter.json, the signed members (checkpoint, timestamp, key), each listed trail's TRAIL_MEMBERS
# under trails/<trail id>/, in matter.json's order, then report.pdf, verification.txt, README.txt
# and manifest.json over all of them.
# Matter format 2 adds matter_key (the key of the matter's leaf tags, audit.evidence.matter_leaves);
# format 1, written before the tags, has none. Format 3 adds batch (the selection's batch, or
# null) and gives each left_out entry a reason a verifier checks against the log's leaves
# (matter_leaves.LEFT_OUT_REASONS); a bundle holding a leaf that carries submitted_at must be
# format 3, one holding a tagged leaf at least format 2.
MATTER_FORMAT_VERSION = 3
MATTER_FORMAT_VERSIONS = (1, 2, 3)
SIGNED_MEMBERS = (CHECKPOINT, TIMESTAMP, VERIFIER_KEY)
TRAIL_MEMBERS = (
    RECORDS,
    CHAIN,
    LEDGER_LEAF,
    INCLUSION_PROOF,
    DISCLOSURES,
    PROMPT,
    ANSWER,
    MODELS,
    PARAMS,
    RECEIPT,
    DESTRUCTION,
)
TRAIL_MEMBERS_V5 = tuple(name for name in TRAIL_MEMBERS if name not in (RECEIPT, DESTRUCTION))


def trail_members_of(bundle_format: int) -> tuple[str, ...]:
    """A trail's members in a bundle of that format."""
    return TRAIL_MEMBERS if bundle_format >= RECEIPTS_SINCE else TRAIL_MEMBERS_V5


def trail_member(trail_id: str, name: str) -> str:
    """A trail's member's name inside a matter bundle."""
    return f"trails/{trail_id}/{name}"


def matter_member_names(
    trail_ids: Sequence[str], bundle_format: int = BUNDLE_FORMAT_VERSION
) -> list[str]:
    """A matter bundle's member names, in order, for the trails matter.json lists."""
    own = trail_members_of(bundle_format)
    per_trail = [trail_member(t, name) for t in trail_ids for name in own]
    return [MATTER, *SIGNED_MEMBERS, *per_trail, REPORT, VERIFICATION, README, MANIFEST]


# The member that carries each disclosed text (the others travel inside disclosures.json).
TEXT_MEMBERS = {"prompt.rendered": PROMPT, "answer.text": ANSWER}

# A verifier refuses, before reading it, a bundle larger than this or a member whose stored
# size is larger, so a hostile bundle costs at most this much memory.
MAX_BUNDLE_BYTES = 256 * 1024 * 1024
MAX_MEMBER_BYTES = 64 * 1024 * 1024

# The deterministic packing. These are the values Python's zipfile writes for a ZipInfo with
# date_time (1980, 1, 1, 0, 0, 0), compress_type ZIP_STORED, create_system 3 and external_attr
# 0o644 << 16; we write the bytes ourselves so that no library version can change them.
ZIP_EXTERNAL_ATTR = 0o644 << 16
ZIP_CREATE_SYSTEM = 3  # Unix
_ZIP_VERSION = 20  # 2.0: stored members, no zip64
_DOS_TIME = 0  # 00:00:00
_DOS_DATE = (0 << 9) | (1 << 5) | 1  # 1980-01-01
_ZIP_LIMIT = (1 << 31) - 1  # beyond this zipfile itself would switch to zip64


def deterministic_zip(members: Sequence[tuple[str, bytes]]) -> bytes:
    """Pack (name, data) pairs, in the order given, into a zip whose bytes depend on nothing else
    (DeterministicZip's layout, in memory)."""
    out = io.BytesIO()
    packed = DeterministicZip(out)
    for name, data in members:
        packed.add(name, data)
    packed.finish()
    return out.getvalue()


class DeterministicZip:
    """A zip whose bytes depend on nothing but its members and their order, written to `out` a
    member at a time (the central directory, a few dozen bytes a member, is all it keeps).

    Per member a local file header (version needed 2.0, flags 0, method 0 = stored, DOS time 0 and
    date 1980-01-01, CRC-32, sizes, the ASCII name, no extra field) then the data; then the
    central directory (version made by 3 << 8 | 20, same fields, no comment, internal attributes
    0, external attributes 0o644 << 16, the local header's offset); then the end-of-central-
    directory record with no comment. `digests` holds each member's SHA-256, for the manifest.
    """

    def __init__(self, out: BinaryIO):
        self._out = out
        self._written = 0
        self._central = bytearray()
        self.digests: dict[str, str] = {}

    def add(self, name: str, data: bytes) -> None:
        raw_name = name.encode("ascii")
        if not raw_name or name in self.digests or len(raw_name) > 0xFFFF:
            raise ValueError(f"bad or duplicate member name {name!r}")
        data = bytes(data)
        if len(data) >= _ZIP_LIMIT or self._written >= _ZIP_LIMIT:
            raise ValueError("bundle too large for a zip without zip64")
        self.digests[name] = hashlib.sha256(data).hexdigest()
        common = struct.pack(
            "<HHHHHIIIH",
            _ZIP_VERSION,
            0,
            zipfile.ZIP_STORED,
            _DOS_TIME,
            _DOS_DATE,
            zlib.crc32(data) & 0xFFFFFFFF,
            len(data),
            len(data),
            len(raw_name),
        )
        self._central += (
            b"PK\x01\x02"
            + struct.pack("<BB", _ZIP_VERSION, ZIP_CREATE_SYSTEM)
            + common
            + struct.pack("<HHHHII", 0, 0, 0, 0, ZIP_EXTERNAL_ATTR, self._written)
            + raw_name
        )
        self._write(b"PK\x03\x04" + common + struct.pack("<H", 0) + raw_name)
        self._write(data)

    def finish(self) -> None:
        """The central directory and its end record."""
        count = len(self.digests)
        if count > 0xFFFF or self._written + len(self._central) >= _ZIP_LIMIT:
            raise ValueError("bundle too large for a zip without zip64")
        central_at = self._written
        self._write(bytes(self._central))
        self._write(
            b"PK\x05\x06"
            + struct.pack("<HHHHIIH", 0, 0, count, count, len(self._central), central_at, 0)
        )

    def _write(self, data: bytes) -> None:
        self._out.write(data)
        self._written += len(data)


def described(first_record: object) -> tuple[dict, dict]:
    """models.json and params.json of a trail, as its first record names them: the request
    record (format 2), or the first decision (format 1). Exporters write them so; verifiers
    require exactly these bytes, so neither member can say what the records do not."""
    first = first_record if isinstance(first_record, dict) else {}
    models = first.get("models") or {"draft": first.get("draft"), "target": first.get("target")}
    return models, first.get("params", {})


# destruction.json: {"destroyed": false}, or when the trail's texts were destroyed (its salt,
# openings and texts gone, its records and commitments kept) the erasure's time (UTC, to the
# second), who ran it and the order's text.
DESTROYED_KEYS = ("destroyed", "destroyed_at", "destroyed_by", "order")


def destruction_statement(destruction: dict | None) -> dict:
    """destruction.json's object for a trail's destruction ({"destroyed_at", "destroyed_by",
    "order"}), or for a trail never destroyed (None)."""
    if destruction is None:
        return {"destroyed": False}
    stated = {"destroyed": True, **destruction}
    if tuple(sorted(stated)) != DESTROYED_KEYS:
        raise ValueError(f"a destruction states exactly {', '.join(DESTROYED_KEYS[1:])}")
    return stated


def json_member(value: object) -> bytes:
    """The form of the bundle's JSON members (all but the manifest): sorted keys, two-space
    indent, UTF-8, one trailing newline."""
    text = json.dumps(value, sort_keys=True, indent=2, ensure_ascii=False, allow_nan=False)
    return (text + "\n").encode("utf-8")


def manifest_member(
    members: Sequence[tuple[str, bytes]], format_version: int = BUNDLE_FORMAT_VERSION
) -> bytes:
    """manifest.json: canonical JSON of the SHA-256 of every other member."""
    files = {name: hashlib.sha256(data).hexdigest() for name, data in members}
    return manifest_of(files, format_version)


def manifest_of(digests: dict[str, str], format_version: int = BUNDLE_FORMAT_VERSION) -> bytes:
    """manifest.json from every other member's SHA-256 hex, by name."""
    return chain.canonical_json({"files": digests, "format_version": format_version}).encode()

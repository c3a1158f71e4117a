"""Verify a Pathfinder evidence bundle offline.

    python -m audit.offline_verify BUNDLE.zip [--key VERIFIER_KEY]

Imports only the standard library, `cryptography` and the pure modules audit.chain, audit.merkle
and audit.checkpoints (never Django), so an auditor can run it on a machine of their own with
nothing but those four files. It also defines the bundle's byte layout (member names, the
deterministic zip packing, the JSON forms), which audit.bundle uses to write bundles.

What a passing bundle proves: the records in records.jsonl form an unbroken hash chain from the
genesis hash of their trail; the ledger leaf seals exactly that trail, record count and head; the
leaf is in the global log whose root the checkpoint states; and the checkpoint is signed by the
key in verifier-key.txt. Pin that key with --key (obtained out of band, e.g. from the operator's
published key or an earlier export): without it, the signature only shows the bundle is internally
consistent, since whoever made the bundle also chose the key. models.json, params.json,
verification.txt and README.txt are covered by the manifest only, not by the signature; the
signed records themselves carry each step's model identities and parameters.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import re
import struct
import sys
import zipfile
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from audit import chain, checkpoints, merkle

BUNDLE_FORMAT_VERSION = 1
RECORDS = "records.jsonl"
CHAIN = "chain.json"
LEDGER_LEAF = "ledger-leaf.json"
INCLUSION_PROOF = "inclusion-proof.json"
CHECKPOINT = "checkpoint.txt"
VERIFIER_KEY = "verifier-key.txt"
MODELS = "models.json"
PARAMS = "params.json"
VERIFICATION = "verification.txt"
README = "README.txt"
MANIFEST = "manifest.json"
MEMBER_NAMES = (
    RECORDS,
    CHAIN,
    LEDGER_LEAF,
    INCLUSION_PROOF,
    CHECKPOINT,
    VERIFIER_KEY,
    MODELS,
    PARAMS,
    VERIFICATION,
    README,
    MANIFEST,
)

# The deterministic packing. These are the values Python's zipfile writes for a ZipInfo with
# date_time (1980, 1, 1, 0, 0, 0), compress_type ZIP_STORED, create_system 3 and external_attr
# 0o644 << 16; we write the bytes ourselves so that no library version can change them.
ZIP_DATE_TIME = (1980, 1, 1, 0, 0, 0)
ZIP_EXTERNAL_ATTR = 0o644 << 16
ZIP_CREATE_SYSTEM = 3  # Unix
_ZIP_VERSION = 20  # 2.0: stored members, no zip64
_DOS_TIME = 0  # 00:00:00
_DOS_DATE = (0 << 9) | (1 << 5) | 1  # 1980-01-01
_ZIP_LIMIT = (1 << 31) - 1  # beyond this zipfile itself would switch to zip64
_HEX64 = re.compile(r"[0-9a-f]{64}", re.ASCII)
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", re.ASCII)


def deterministic_zip(members: Sequence[tuple[str, bytes]]) -> bytes:
    """Pack (name, data) pairs, in the order given, into a zip whose bytes depend on nothing else.

    Per member a local file header (version needed 2.0, flags 0, method 0 = stored, DOS time 0 and
    date 1980-01-01, CRC-32, sizes, the ASCII name, no extra field) then the data; then the
    central directory (version made by 3 << 8 | 20, same fields, no comment, internal attributes
    0, external attributes 0o644 << 16, the local header's offset); then the end-of-central-
    directory record with no comment.
    """
    out = bytearray()
    central = bytearray()
    names = set()
    for name, data in members:
        raw_name = name.encode("ascii")
        if not raw_name or name in names or len(raw_name) > 0xFFFF:
            raise ValueError(f"bad or duplicate member name {name!r}")
        names.add(name)
        data = bytes(data)
        if len(data) >= _ZIP_LIMIT or len(out) >= _ZIP_LIMIT:
            raise ValueError("bundle too large for a zip without zip64")
        crc = zlib.crc32(data) & 0xFFFFFFFF
        offset = len(out)
        common = struct.pack(
            "<HHHHHIIIH",
            _ZIP_VERSION,
            0,
            zipfile.ZIP_STORED,
            _DOS_TIME,
            _DOS_DATE,
            crc,
            len(data),
            len(data),
            len(raw_name),
        )
        out += b"PK\x03\x04" + common + struct.pack("<H", 0) + raw_name + data
        central += (
            b"PK\x01\x02"
            + struct.pack("<BB", _ZIP_VERSION, ZIP_CREATE_SYSTEM)
            + common
            + struct.pack("<HHHHII", 0, 0, 0, 0, ZIP_EXTERNAL_ATTR, offset)
            + raw_name
        )
    if len(members) > 0xFFFF or len(out) + len(central) >= _ZIP_LIMIT:
        raise ValueError("bundle too large for a zip without zip64")
    eocd = b"PK\x05\x06" + struct.pack(
        "<HHHHIIH", 0, 0, len(members), len(members), len(central), len(out), 0
    )
    return bytes(out + central + eocd)


def json_member(value: object) -> bytes:
    """The form of the bundle's JSON members (all but the manifest): sorted keys, two-space
    indent, UTF-8, one trailing newline."""
    text = json.dumps(value, sort_keys=True, indent=2, ensure_ascii=False, allow_nan=False)
    return (text + "\n").encode("utf-8")


def manifest_member(members: Sequence[tuple[str, bytes]]) -> bytes:
    """manifest.json: canonical JSON of the SHA-256 of every other member."""
    files = {name: hashlib.sha256(data).hexdigest() for name, data in members}
    return chain.canonical_json({"format_version": BUNDLE_FORMAT_VERSION, "files": files}).encode()


# ---------------------------------------------------------------------------------------------
# Verification


@dataclass
class Check:
    name: str
    failures: list[str] = field(default_factory=list)
    detail: str = ""

    @property
    def ok(self) -> bool:
        return not self.failures

    def fail(self, reason: str) -> None:
        self.failures.append(reason)


class _Malformed(ValueError):
    pass


def _no_duplicates(pairs: list[tuple[str, object]]) -> dict:
    keys = [k for k, _ in pairs]
    if len(keys) != len(set(keys)):
        raise _Malformed("duplicate object key")
    return dict(pairs)


def _reject_constant(name: str) -> None:
    raise _Malformed(f"{name} is not JSON")


def _loads(text: str) -> object:
    return json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_reject_constant)


def _hex_hash(value: object) -> bool:
    return isinstance(value, str) and _HEX64.fullmatch(value) is not None


def _int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


@dataclass
class _Bundle:
    members: dict[str, bytes]
    key: str | None
    checks: list[Check] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # What earlier checks established, for later ones (None when it could not be established).
    trail_id: str | None = None
    record_count: int | None = None
    head_hash: str | None = None
    leaf_index: int | None = None
    leaf_payload: str | None = None
    checkpoint: checkpoints.Checkpoint | None = None

    def check(self, name: str) -> Check:
        result = Check(name)
        self.checks.append(result)
        return result

    def text(self, name: str, check: Check) -> str | None:
        data = self.members.get(name)
        if data is None:
            check.fail(f"{name} is missing")
            return None
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            check.fail(f"{name} is not valid UTF-8")
            return None

    def json(self, name: str, check: Check, keys: set[str] | None = None) -> dict | None:
        """A JSON-object member, which must be in the bundle's JSON form (and have `keys`)."""
        text = self.text(name, check)
        if text is None:
            return None
        try:
            value = _loads(text)
            form = json_member(value)
        except (ValueError, TypeError, RecursionError) as exc:
            check.fail(f"{name} is not valid JSON ({exc})")
            return None
        if not isinstance(value, dict):
            check.fail(f"{name} is not a JSON object")
            return None
        if form != self.members[name]:
            check.fail(f"{name} is not in the bundle's JSON form (sorted keys, 2-space indent)")
        if keys is not None and set(value) != keys:
            check.fail(f"{name} has keys {sorted(value)}, expected {sorted(keys)}")
            return None
        return value


def _read_zip(data: bytes, check: Check) -> list[tuple[str, bytes]] | None:
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
        infos = archive.infolist()
    except Exception as exc:  # hostile input: any parser error is a finding, not a crash
        check.fail(f"not a readable zip file ({type(exc).__name__}: {exc})")
        return None
    members = []
    for info in infos:
        try:
            members.append((info.filename, archive.read(info)))
        except Exception as exc:  # a CRC mismatch, a bad local header, ...
            check.fail(f"member {info.filename!r} cannot be read ({type(exc).__name__}: {exc})")
            raw = _raw_stored(data, info)
            if raw is not None:  # let the content checks see what the member actually holds
                members.append((info.filename, raw))
    return members


def _raw_stored(data: bytes, info: zipfile.ZipInfo) -> bytes | None:
    """The bytes a stored member's local header points at, without zipfile's CRC check."""
    start = info.header_offset
    if info.compress_type != zipfile.ZIP_STORED or start < 0 or start + 30 > len(data):
        return None
    if data[start : start + 4] != b"PK\x03\x04":
        return None
    name_len, extra_len = struct.unpack("<HH", data[start + 26 : start + 30])
    begin = start + 30 + name_len + extra_len
    end = begin + info.compress_size
    return data[begin:end] if end <= len(data) else None


def _check_container(data: bytes, members: list[tuple[str, bytes]], check: Check) -> None:
    try:
        rebuilt = deterministic_zip(members)
    except (ValueError, UnicodeEncodeError) as exc:
        check.fail(f"members cannot be packed deterministically ({exc})")
        return
    if rebuilt != data:
        first = next(
            (i for i, (a, b) in enumerate(zip(rebuilt, data, strict=False)) if a != b),
            min(len(rebuilt), len(data)),
        )
        check.fail(
            "the zip is not byte-for-byte the deterministic packing of its members: its "
            f"metadata or layout was changed (first difference at byte {first}; "
            f"{len(data)} bytes, rebuild {len(rebuilt)})"
        )
    else:
        check.detail = f"byte-for-byte the deterministic packing of its {len(members)} members"


def _check_members(names: list[str], check: Check) -> None:
    expected = list(MEMBER_NAMES)
    if names == expected:
        check.detail = "exactly the expected members, in order"
        return
    missing = [n for n in expected if n not in names]
    extra = [n for n in names if n not in expected]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if missing:
        check.fail(f"missing: {', '.join(missing)}")
    if extra:
        check.fail(f"unexpected: {', '.join(repr(n) for n in extra)}")
    if dupes:
        check.fail(f"duplicated: {', '.join(dupes)}")
    if not (missing or extra or dupes):
        check.fail(f"members are out of order: {names}")


def _check_manifest(b: _Bundle, names: list[str], check: Check) -> None:
    text = b.text(MANIFEST, check)
    if text is None:
        return
    try:
        manifest = _loads(text)
        canonical = chain.canonical_json(manifest)
    except (ValueError, TypeError, RecursionError) as exc:
        check.fail(f"manifest is not canonical JSON ({exc})")
        return
    if canonical != text:
        check.fail("manifest is not in canonical form (sorted keys, no whitespace)")
    if not isinstance(manifest, dict) or set(manifest) != {"format_version", "files"}:
        check.fail("manifest must hold exactly format_version and files")
        return
    if manifest["format_version"] != BUNDLE_FORMAT_VERSION:
        check.fail(f"unsupported bundle format_version {manifest['format_version']!r}")
    files = manifest["files"]
    if not isinstance(files, dict):
        check.fail("manifest files is not an object")
        return
    others = [n for n in names if n != MANIFEST]
    for name in others:
        if name not in files:
            check.fail(f"{name} is not listed in the manifest")
    for name, digest in sorted(files.items()):
        if name not in b.members or name == MANIFEST:
            check.fail(f"manifest lists {name!r}, which is not another member of the bundle")
        elif digest != hashlib.sha256(b.members[name]).hexdigest():
            check.fail(f"{name} does not match its SHA-256 in the manifest")
    if not check.failures:
        check.detail = f"canonical; the SHA-256 of all {len(others)} other members match"


def _check_records(b: _Bundle, check: Check) -> None:
    keys = {"format_version", "trail_id", "genesis_hash", "records", "head_hash", "record_count"}
    meta = b.json(CHAIN, check, keys)
    text = b.text(RECORDS, check)
    if meta is None or text is None:
        return
    if meta["format_version"] != chain.FORMAT_VERSION:
        check.fail(f"unsupported chain format_version {meta['format_version']!r}")
    trail_id = meta["trail_id"]
    if not isinstance(trail_id, str) or not _UUID.fullmatch(trail_id):
        check.fail("trail_id is not a canonical lowercase UUID")
        return
    b.trail_id = trail_id
    genesis = chain.genesis_hash(trail_id)
    if meta["genesis_hash"] != genesis:
        check.fail("genesis_hash is not the genesis hash of trail_id")
    entries = meta["records"]
    if not isinstance(entries, list) or not all(
        isinstance(e, dict)
        and set(e) == {"seq", "prev_hash", "record_hash"}
        and _int(e["seq"])
        and _hex_hash(e["prev_hash"])
        and _hex_hash(e["record_hash"])
        for e in entries
    ):
        check.fail("chain.json records must be objects of seq, prev_hash and record_hash (hex)")
        return
    if text and not text.endswith("\n"):
        check.fail("records.jsonl does not end with a newline")
    lines = text.split("\n")[:-1] if text.endswith("\n") else text.split("\n") if text else []
    if len(lines) != len(entries):
        check.fail(f"records.jsonl has {len(lines)} lines; chain.json lists {len(entries)}")
    stored = [
        chain.StoredRecord(trail_id, e["seq"], e["prev_hash"], e["record_hash"], payload)
        for e, payload in zip(entries, lines, strict=False)
    ]
    summary = chain.verify_trail(trail_id, stored)
    for failure in summary.failures:
        check.fail(f"seq {failure.seq}: {failure.reason}")
    count = meta["record_count"]
    if not _int(count) or count != len(entries) or count != len(lines):
        check.fail(f"record_count {meta['record_count']!r} does not match the records")
    if meta["head_hash"] != summary.head_hash:
        check.fail("head_hash is not the last record's hash")
    if len(lines) == len(entries):
        b.record_count, b.head_hash = summary.record_count, summary.head_hash
    if not check.failures:
        check.detail = (
            f"{summary.record_count} canonical records chain from the genesis of trail "
            f"{trail_id}; head {summary.head_hash}"
        )


def _check_leaf(b: _Bundle, check: Check) -> None:
    leaf = b.json(LEDGER_LEAF, check, {"index", "payload"})
    if leaf is None:
        return
    if not _int(leaf["index"]) or not isinstance(leaf["payload"], str):
        check.fail("ledger leaf index must be a non-negative integer and payload a string")
        return
    b.leaf_index, b.leaf_payload = leaf["index"], leaf["payload"]
    try:
        sealed = _loads(leaf["payload"])
        canonical = chain.canonical_json(sealed)
    except (ValueError, TypeError, RecursionError) as exc:
        check.fail(f"ledger payload is not canonical JSON ({exc})")
        return
    if canonical != leaf["payload"]:
        check.fail("ledger payload is not in canonical form")
    if not isinstance(sealed, dict) or set(sealed) != {
        "v",
        "trail",
        "job",
        "records",
        "head",
        "outcome",
    }:
        check.fail("ledger payload must hold exactly v, trail, job, records, head, outcome")
        return
    if sealed["v"] != chain.FORMAT_VERSION:
        check.fail(f"ledger payload version {sealed['v']!r} is not {chain.FORMAT_VERSION}")
    if b.trail_id is None or b.record_count is None:
        check.fail("cannot compare the ledger leaf with the records (see the records check)")
        return
    if sealed["trail"] != b.trail_id:
        check.fail(f"ledger leaf seals trail {sealed['trail']!r}, not this trail {b.trail_id}")
    if not _int(sealed["records"]) or sealed["records"] != b.record_count:
        check.fail(
            f"ledger leaf seals {sealed['records']!r} records; the bundle has {b.record_count}"
        )
    if sealed["head"] != b.head_hash:
        check.fail("ledger leaf seals another head hash than the records' head")
    if not check.failures:
        check.detail = (
            f"ledger entry {b.leaf_index} seals this trail, {b.record_count} records and its head "
            f"(job {sealed['job']}, outcome {sealed['outcome']})"
        )


def _check_proof(b: _Bundle, leaf_check: Check, proof_check: Check) -> None:
    keys = {"leaf_index", "tree_size", "proof", "leaf_hash"}
    doc = b.json(INCLUSION_PROOF, proof_check, keys)
    note = b.text(CHECKPOINT, proof_check)
    if note is not None:
        try:
            b.checkpoint = checkpoints.parse_unverified(note)
        except checkpoints.CheckpointError as exc:
            proof_check.fail(f"checkpoint cannot be read ({exc})")
    if doc is None:
        leaf_check.fail("no usable inclusion-proof.json to compare with")
        return
    if not (
        _int(doc["leaf_index"])
        and _int(doc["tree_size"])
        and _hex_hash(doc["leaf_hash"])
        and isinstance(doc["proof"], list)
        and all(_hex_hash(p) for p in doc["proof"])
    ):
        proof_check.fail("inclusion proof fields must be integers and 64-digit lowercase hex")
        leaf_check.fail("no usable inclusion-proof.json to compare with")
        return
    claimed_leaf = bytes.fromhex(doc["leaf_hash"])
    if b.leaf_payload is None:
        leaf_check.fail("no usable ledger leaf payload")
    else:
        recomputed = merkle.leaf_hash(b.leaf_payload.encode("utf-8"))
        if recomputed != claimed_leaf:
            leaf_check.fail("leaf_hash is not SHA-256(0x00 || ledger payload)")
        else:
            leaf_check.detail = f"SHA-256(0x00 || payload) = {claimed_leaf.hex()}"
    if b.leaf_index is not None and doc["leaf_index"] != b.leaf_index:
        proof_check.fail(
            f"proof is for leaf {doc['leaf_index']}, but the ledger leaf is entry {b.leaf_index}"
        )
    if b.checkpoint is None:
        return
    if doc["tree_size"] != b.checkpoint.size:
        proof_check.fail(
            f"proof is for a tree of {doc['tree_size']} leaves; the checkpoint is for "
            f"{b.checkpoint.size}"
        )
    proof = [bytes.fromhex(p) for p in doc["proof"]]
    if not merkle.verify_inclusion(
        doc["leaf_index"], b.checkpoint.size, claimed_leaf, proof, b.checkpoint.root
    ):
        proof_check.fail(
            f"the inclusion proof of leaf {doc['leaf_index']} does not lead to the checkpoint's "
            f"root (tree of {b.checkpoint.size} leaves)"
        )
    if not proof_check.failures:
        proof_check.detail = (
            f"leaf {doc['leaf_index']} is in the tree of {b.checkpoint.size} leaves whose root "
            f"is {b.checkpoint.root.hex()}"
        )


def _bundled_key(b: _Bundle, check: Check) -> str | None:
    text = b.text(VERIFIER_KEY, check)
    if text is None:
        return None
    if not text.endswith("\n") or "\n" in text[:-1]:
        check.fail("verifier-key.txt must be one line ending in a newline")
        return None
    return text[:-1]


def _check_signature(b: _Bundle, check: Check, key: str | None) -> checkpoints.Checkpoint | None:
    note = b.text(CHECKPOINT, check)
    if note is None or key is None:
        return None
    try:
        return checkpoints.parse_and_verify(note, key)
    except checkpoints.CheckpointError as exc:
        check.fail(str(exc))
        return None


def _check_descriptive(b: _Bundle, check: Check) -> None:
    for name in (MODELS, PARAMS):
        b.json(name, check)
    for name in (VERIFICATION, README):
        b.text(name, check)
    if not check.failures:
        check.detail = "models.json and params.json are JSON objects; the texts are UTF-8"


def check_bundle(source: str | Path | bytes, *, key: str | None = None) -> list[Check]:
    """Every check of a bundle (a path, or the zip's bytes), in order; failures are collected."""
    container = Check("zip container")
    try:
        data = (
            bytes(source) if isinstance(source, (bytes, bytearray)) else Path(source).read_bytes()
        )
    except OSError as exc:
        container.fail(f"cannot read the bundle ({exc})")
        return [container]
    members = _read_zip(data, container)
    if members is None:
        return [container]
    _check_container(data, members, container)
    b = _Bundle(members=dict(members), key=key)
    b.checks.append(container)
    names = [n for n, _ in members]
    _check_members(names, b.check("members"))
    _check_manifest(b, names, b.check("manifest"))
    _check_records(b, b.check("records and chain"))
    _check_leaf(b, b.check("ledger leaf"))
    leaf_check = b.check("leaf hash")
    _check_proof(b, leaf_check, b.check("inclusion proof"))
    sig = b.check("checkpoint signature")
    bundled = _bundled_key(b, sig)
    cp = _check_signature(b, sig, bundled)
    if cp is not None:
        sig.detail = (
            f"origin {cp.origin!r}, tree size {cp.size}, signed by the key in verifier-key.txt "
            f"({bundled.split('+', 1)[0]}+{bundled.split('+')[1]})"
        )
    if key is not None:
        pinned = b.check("pinned key")
        key = key.strip()
        if bundled is not None and bundled != key:
            pinned.fail("verifier-key.txt is not the key you pinned with --key")
        if _check_signature(b, pinned, key) is not None and pinned.ok:
            pinned.detail = (
                "verifier-key.txt is the pinned key, and the checkpoint verifies with it"
            )
    _check_descriptive(b, b.check("descriptive files"))
    return b.checks


def verify_bundle(source: str | Path | bytes, *, key: str | None = None) -> list[str]:
    """Every failure found in the bundle, as 'check: reason' lines; empty when it verifies."""
    return [f"{c.name}: {reason}" for c in check_bundle(source, key=key) for reason in c.failures]


UNPINNED_NOTE = (
    "No --key given: the checkpoint signature was checked only against the key inside the "
    "bundle, which whoever produced the bundle chose. Pin the log's verifier key, obtained out "
    "of band, with --key."
)
UNSIGNED_FILES_NOTE = (
    "models.json, params.json, verification.txt and README.txt are protected by the manifest "
    "only, not by the signature; the signed records carry each step's models and parameters."
)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m audit.offline_verify",
        description="Verify a Pathfinder evidence bundle offline.",
    )
    parser.add_argument("bundle", help="the bundle .zip file")
    parser.add_argument(
        "--key", help="the log's verifier key (<name>+<id>+<key>), obtained out of band"
    )
    args = parser.parse_args(argv)
    checks = check_bundle(args.bundle, key=args.key)
    print(f"Pathfinder evidence bundle {args.bundle}")
    for c in checks:
        if c.ok:
            print(f"OK    {c.name}: {c.detail}" if c.detail else f"OK    {c.name}")
        else:
            print(f"FAIL  {c.name}:")
            for reason in c.failures:
                print(f"        - {reason}")
    if args.key is None:
        print(f"NOTE  {UNPINNED_NOTE}")
    print(f"NOTE  {UNSIGNED_FILES_NOTE}")
    failures = sum(len(c.failures) for c in checks)
    if failures:
        print(f"RESULT: FAILED ({failures} failure{'s' if failures != 1 else ''})")
        return 1
    print(f"RESULT: VERIFIED ({len(checks)} checks passed)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Independent verifier of Pathfinder evidence bundles, written from docs/audit-format.md alone.

    python3 tests/independent/verify_from_doc.py BUNDLE.zip --key LOG_VERIFIER_KEY [--key OLDER_KEY ...]
                                                 [--log DIR_OR_URL]

Written by an opposing party's examiner from the published specification (docs/audit-format.md,
"the doc" below; section names are quoted in the comments) without reading Pathfinder's code.
Uses only the Python standard library and the `cryptography` package (Ed25519).

It prints one line per failed check (`FAIL <check>: <detail>`), a `SKIP` line for what it was
asked about but cannot check, and finally `VERIFIED` (exit 0) when every check it runs passed;
otherwise it exits 1 (2 for bad arguments).

What it checks (doc section in brackets):
  * zip container: stored members, rebuilt byte for byte with the deterministic packing
    ["The evidence bundle (bundle format 6)", the paragraph "The zip is deterministic"]; members
    exactly the format's, in order (one-trail table: format 6's, with receipt.cose and
    destruction.json after params.json, or format 4/5's without them; for a matter bundle ["The
    matter bundle"] matter.json, checkpoint.txt, checkpoint.tsr, verifier-key.txt,
    trails/<id>/<the one-trail per-trail members: 11 in format 6, 9 before, every trail alike>
    in matter.json's order, report.pdf, verification.txt, README.txt, manifest.json);
  * manifest.json canonical, every other member's SHA-256, bundle format 6 exactly when format
    6's members are there, else 5 or 4;
  * JSON members written exactly as `json.dumps(sort_keys, indent=2, ensure_ascii=False)+"\\n"`
    (re-serialised with an independent writer);
  * per trail ["Level 1"]: records.jsonl canonical JSON ["Canonical payloads"], the hash chain from
    PF-GENESIS-v1 / PF-RECORD-v1, chain.json consistent, record structure (request first,
    decisions' step/job/params/models agreeing with the request, answer last iff the outcome
    served one, its step count and stop reason, format-2 output ids = the emitted lists);
  * ledger leaf ["Level 2"]: canonical payload, one of the three key sets, seals this trail's id,
    format version, record count, head and the request record's job; tagged/selection leaf
    rules (sealed_at, null tag iff no request, submitted_at = the request's);
  * leaf hash and RFC 9162 inclusion proof to the checkpoint's root of the checkpoint's size
    ["The Merkle log and its signed checkpoints"];
  * checkpoint: C2SP signed note syntax, Ed25519 signature of the pinned key (key id computed
    as SHA-256(name || 0x0A || 0x01 || key)[:4]), verifier-key.txt is a pinned key;
  * disclosures ["Bound texts and their salts", disclosures.json row]: exactly the bound fields,
    salted digests of prompt.txt / answer.txt / values, withheld ones empty, unbound texts empty;
    format-3 slot openings and format-4 workings openings open their commitments (PF-TOKEN-v3)
    and a disclosed format-3 answer.token_ids equals the opened emitted slots;
  * models.json / params.json byte for byte what the first record names;
  * receipt.cose (format 6) ["COSE Receipts (RFC 9942)", check `receipt`]: empty is reported
    (SKIP); otherwise exactly the deterministic CBOR (own encoder) of tag 18 [<<{1: -8, 4: kid,
    15: {1: origin}, 395: 1}>>, {396: {-1: [<<[tree_size, leaf_index, path]>>]}}, nil, its last
    64 bytes], kid the id of verifier-key.txt's key, origin and tree_size the checkpoint's,
    leaf_index the ledger leaf's, path inclusion-proof.json's (folding to the checkpoint's root),
    and that Ed25519 signature of verifier-key.txt's key verifying over
    ["Signature1", <<protected>>, h'', the checkpoint's root];
  * destruction.json (format 6, check `destruction`): in the bundle's JSON form, exactly
    {"destroyed": false} or {"destroyed": true, "destroyed_at": "YYYY-MM-DDTHH:MM:SSZ",
    "destroyed_by", "order" (non-empty strings)}; a destroyed trail has every disclosures.json
    entry {"withheld": true} (so no slot opened) and prompt.txt / answer.txt empty;
  * matter bundles ["The matter bundle (matter format 3)", "Older matter formats"]: matter.json's
    form (formats 1, 2, 3), each listed trail's chain/leaf/job/outcome/attempt/matter, matter_tag
    HMAC with matter_key, matter format not below its leaves', the selection (since/until/batch)
    by the leaf's submitted_at/batch_tag, attempts' previous_trail;
  * with --log ["The log over HTTP (C2SP tlog-tiles)", "Why a trail is left out"]: reads every
    entry tile up to the checkpoint's size, requires the leaves make the checkpoint's root, finds
    every leaf the matter key tags, requires each listed or left out, checks every left_out
    reason against the leaves (open, sealed_after_checkpoint, no_request, outside_selection;
    matter format 2's texts by their first words).

What it does NOT check (by design of this brief): the decision rule (draws, ratios, accept tests,
context lengths), format-3/4 slot semantics beyond opening commitments and the emitted list,
README.txt / verification.txt / report.pdf (the descriptive members: only their manifest
hashes are checked), destruction.json's time, operator and order beyond their form (the
service's word, per the doc), witness cosignatures (other signature lines are only syntax-checked),
RFC 3161 timestamps (a non-empty checkpoint.tsr is reported as SKIP), bundle format 2/3's
--unproven-descriptive mode (refused) and bundle format 1.

Where the doc left a choice, this verifier takes the strict reading (doc line numbers as of
writing): matter format 1's key set is format 3's minus matter_key and batch (never stated,
843/849); the format-1 refusal counts a leaf with the `matter_tag` key at all (even null) as
"carrying a tag", while "fails outright when no leaf carries a tag" needs a non-null one
(687/821/850); a listed trail with no submitted_at in leaf or request fails a since/until
selection (685/794); "sealed before since" compares sealed_at's day (807); format 2's batch B
is the last word of the first reason ending "not a line of batch B" (848); `no_request` needs a
leaf holding the key "matter_tag" with null (806); a left-out previous attempt must be the
left-out entry of that trail id with the job's id (823); a failing signature line of the pinned
key's name and id fails the note (466-475, cf. 527); disclosed `salt`s are field/slot salts,
used as raw 32 bytes (124-125, 587). Bundle format 6: the receipt's CWT claims are {1: iss} only
(597 "There is no sub"), not the 2-claim map of the example bytes and receipt-golden.cbor
(609-611); a matter bundle's trails/<id>/ holds the one-trail per-trail members of its format
(908 "exactly as a one-trail bundle holds them", though its list names format 5's nine) and its
manifest says 6 (911 still says 5); destroyed_by and order are non-empty strings (696 says only
"who ran it", "the order's text"); the receipt's path must fold to the checkpoint's root under
the `receipt` check too, not only under `inclusion proof` (603-606).
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import hmac
import json
import os
import re
import struct
import sys
import unicodedata
import urllib.request
import zlib
from datetime import date, datetime

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

# ---------------------------------------------------------------------------------------------
# Reporting
# ---------------------------------------------------------------------------------------------

FAILURES: list[str] = []


def fail(check: str, detail: str) -> None:
    line = f"FAIL {check}: {detail}"
    FAILURES.append(line)
    print(line)


def skip(check: str, detail: str) -> None:
    print(f"SKIP {check}: {detail}")


class Stop(Exception):
    """Raised to abandon a group of checks after a FAIL has been printed."""


def require(cond: bool, check: str, detail: str) -> bool:
    if not cond:
        fail(check, detail)
    return bool(cond)


# ---------------------------------------------------------------------------------------------
# Primitives ("Notation", "Canonical payloads")
# ---------------------------------------------------------------------------------------------

HEX64 = re.compile(r"\A[0-9a-f]{64}\Z")
UUID_RE = re.compile(r"\A[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\Z")
UTC_RE = re.compile(r"\A\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z\Z")
DAY_RE = re.compile(r"\A\d{4}-\d{2}-\d{2}\Z")
MAX_INT = 2**53 - 1


def sha256_hex(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


def is_hex64(v) -> bool:
    return isinstance(v, str) and bool(HEX64.match(v))


def is_uuid(v) -> bool:
    return isinstance(v, str) and bool(UUID_RE.match(v))


def is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def is_utc_time(v) -> bool:
    """A UTC time: YYYY-MM-DDTHH:MM:SS.ffffffZ ("The request record")."""
    if not isinstance(v, str) or not UTC_RE.match(v):
        return False
    try:
        datetime.strptime(v, "%Y-%m-%dT%H:%M:%S.%fZ")
    except ValueError:
        return False
    return True


def is_day(v) -> bool:
    if not isinstance(v, str) or not DAY_RE.match(v):
        return False
    try:
        date.fromisoformat(v)
    except ValueError:
        return False
    return True


class JSONError(ValueError):
    pass


def _no_dups(pairs):
    d = {}
    for k, v in pairs:
        if k in d:
            raise JSONError(f"duplicate key {k!r}")
        d[k] = v
    return d


def _no_float(s):
    raise JSONError(f"a float {s!r} (the format has no floats)")


def _no_const(s):
    raise JSONError(f"{s} is not JSON")


def parse_json(data: bytes):
    """Parse strict JSON from UTF-8 bytes: no duplicate keys, no floats, no NaN/Infinity."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise JSONError(f"not UTF-8 ({e})") from None
    try:
        return json.loads(
            text, object_pairs_hook=_no_dups, parse_float=_no_float, parse_constant=_no_const
        )
    except JSONError:
        raise
    except ValueError as e:
        raise JSONError(str(e)) from None


def _esc(s: str) -> str:
    """String escaping of canonical JSON: only ", \\ and U+0000-U+001F are escaped; of those,
    \\b \\f \\n \\r \\t short, the others \\u00xx lowercase; everything else literal."""
    out = ['"']
    short = {
        '"': '\\"',
        "\\": "\\\\",
        "\b": "\\b",
        "\f": "\\f",
        "\n": "\\n",
        "\r": "\\r",
        "\t": "\\t",
    }
    for ch in s:
        if ch in short:
            out.append(short[ch])
        elif ord(ch) < 0x20:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def _scalar(v) -> str:
    if v is None:
        return "null"
    if v is True:
        return "true"
    if v is False:
        return "false"
    if is_int(v):
        if not -MAX_INT <= v <= MAX_INT:
            raise JSONError(f"integer {v} outside +-(2^53-1)")
        return str(v)
    if isinstance(v, str):
        return _esc(v)
    raise JSONError(f"value of type {type(v).__name__} is not allowed")


def canonical(v) -> str:
    """Canonical JSON ("Canonical payloads"): keys sorted by code point, no whitespace."""
    if isinstance(v, dict):
        return "{" + ",".join(_esc(k) + ":" + canonical(v[k]) for k in sorted(v)) + "}"
    if isinstance(v, list):
        return "[" + ",".join(canonical(x) for x in v) + "]"
    return _scalar(v)


def pretty(v, indent: int = 0) -> str:
    """The JSON members' form (bundle table, paragraph after it): sorted keys, two-space indent,
    ": " and "," separators, [] / {} when empty, strings as in canonical JSON."""
    pad = "  " * (indent + 1)
    end = "  " * indent
    if isinstance(v, dict):
        if not v:
            return "{}"
        items = [pad + _esc(k) + ": " + pretty(v[k], indent + 1) for k in sorted(v)]
        return "{\n" + ",\n".join(items) + "\n" + end + "}"
    if isinstance(v, list):
        if not v:
            return "[]"
        return "[\n" + ",\n".join(pad + pretty(x, indent + 1) for x in v) + "\n" + end + "]"
    return _scalar(v)


def canonical_bytes(v) -> bytes:
    return canonical(v).encode("utf-8")  # raises on lone surrogates


def load_canonical(data: bytes, check: str, what: str):
    """Parse and require the bytes to be canonical JSON; returns the value or raises Stop."""
    try:
        v = parse_json(data)
        ok = canonical_bytes(v) == data
    except (JSONError, UnicodeEncodeError) as e:
        fail(check, f"{what} is not valid JSON ({e})")
        raise Stop
    if not ok:
        fail(check, f"{what} is not in canonical form")
        raise Stop
    return v


def load_pretty(data: bytes, check: str, what: str):
    """Parse a JSON member and require the bytes to be exactly its pretty form plus \\n."""
    try:
        v = parse_json(data)
        ok = (pretty(v) + "\n").encode("utf-8") == data
    except (JSONError, UnicodeEncodeError) as e:
        fail(check, f"{what} is not valid JSON ({e})")
        raise Stop
    if not ok:
        fail(check, f"{what} is not written in the bundle's JSON form")
        raise Stop
    return v


def is_control(c: str) -> bool:
    return unicodedata.category(c) == "Cc"


def b64_canonical(s: str) -> bytes | None:
    """Standard base64 with padding that re-encodes to the same text, else None."""
    try:
        raw = base64.b64decode(s.encode("ascii"), validate=True)
    except (ValueError, UnicodeEncodeError):
        return None
    if base64.b64encode(raw).decode("ascii") != s:
        return None
    return raw


# ---------------------------------------------------------------------------------------------
# Zip container ("The evidence bundle": "The zip is deterministic ...")
# ---------------------------------------------------------------------------------------------

MAX_BUNDLE = 256 * 1024 * 1024
MAX_MEMBER = 64 * 1024 * 1024
LFH = struct.Struct("<IHHHHHIIIHH")  # local file header, 30 bytes
CDH = struct.Struct("<IHHHHHHIIIHHHHHII")  # central directory header, 46 bytes
EOCD = struct.Struct("<IHHHHIIH")  # end of central directory, 22 bytes


def build_zip(members: list[tuple[str, bytes]]) -> bytes:
    """The doc's deterministic packing: stored, version needed 20, flags 0, DOS time 0, date
    0x0021, made by 0x0314, external attributes 0o644 << 16, no extras, no comment."""
    out = bytearray()
    central = bytearray()
    for name, data in members:
        nb = name.encode("ascii")
        crc = zlib.crc32(data) & 0xFFFFFFFF
        offset = len(out)
        out += LFH.pack(0x04034B50, 20, 0, 0, 0, 0x0021, crc, len(data), len(data), len(nb), 0)
        out += nb + data
        central += CDH.pack(
            0x02014B50,
            0x0314,
            20,
            0,
            0,
            0,
            0x0021,
            crc,
            len(data),
            len(data),
            len(nb),
            0,
            0,
            0,
            0,
            0o644 << 16,
            offset,
        )
        central += nb
    cd_off = len(out)
    out += central
    out += EOCD.pack(0x06054B50, 0, 0, len(members), len(members), len(central), cd_off, 0)
    return bytes(out)


def read_zip(blob: bytes) -> list[tuple[str, bytes]]:
    """Read members in central-directory order (our own parser, not zipfile's lenient one),
    then require that the doc's packing of those members gives back exactly these bytes."""
    check = "zip container"
    if len(blob) > MAX_BUNDLE:
        fail(check, "bundle over 256 MiB refused")
        raise Stop
    if len(blob) < EOCD.size:
        fail(check, "too short to be a zip")
        raise Stop
    sig, d0, d1, n0, n, cd_size, cd_off, clen = EOCD.unpack_from(blob, len(blob) - EOCD.size)
    if sig != 0x06054B50 or clen != 0 or d0 or d1 or n0 != n:
        fail(check, "no end-of-central-directory record at the end (comment, zip64 or multi-disk?)")
        raise Stop
    members: list[tuple[str, bytes]] = []
    pos = cd_off
    try:
        for _ in range(n):
            f = CDH.unpack_from(blob, pos)
            if f[0] != 0x02014B50:
                raise ValueError("bad central directory signature")
            method, csize, usize, nlen, xlen, clen2, off = (
                f[4],
                f[8],
                f[9],
                f[10],
                f[11],
                f[12],
                f[16],
            )
            name_b = blob[pos + CDH.size : pos + CDH.size + nlen]
            pos += CDH.size + nlen + xlen + clen2
            try:
                name = name_b.decode("ascii")
            except UnicodeDecodeError:
                raise ValueError(f"non-ASCII member name {name_b!r}")
            if method != 0 or csize != usize:
                fail(check, f"member {name} is compressed (refused)")
                raise Stop
            if usize > MAX_MEMBER:
                fail(check, f"member {name} over 64 MiB refused")
                raise Stop
            lf = LFH.unpack_from(blob, off)
            if lf[0] != 0x04034B50:
                raise ValueError(f"no local header for {name}")
            start = off + LFH.size + lf[9] + lf[10]
            members.append((name, blob[start : start + usize]))
    except (struct.error, ValueError) as e:
        fail(check, f"unreadable zip structure ({e})")
        raise Stop
    names = [m[0] for m in members]
    if len(set(names)) != len(names):
        fail(check, "duplicate member names")
        raise Stop
    if build_zip(members) != blob:
        fail(check, "the container does not rebuild byte for byte with the doc's packing")
    return members


# ---------------------------------------------------------------------------------------------
# Merkle tree ("The Merkle log and its signed checkpoints", RFC 9162 section 2.1)
# ---------------------------------------------------------------------------------------------


def leaf_hash(d: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + d).digest()


def node_hash(l: bytes, r: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + l + r).digest()


def mth(hashes: list[bytes]) -> bytes:
    """MTH over already-hashed leaves (k = the largest power of two < n)."""
    n = len(hashes)
    if n == 0:
        return hashlib.sha256(b"").digest()
    if n == 1:
        return hashes[0]
    k = 1
    while k * 2 < n:
        k *= 2
    return node_hash(mth(hashes[:k]), mth(hashes[k:]))


def root_from_inclusion(index: int, size: int, lh: bytes, proof: list[bytes]) -> bytes | None:
    """RFC 9162 section 2.1.3.2: the root an inclusion proof leads to, or None if malformed."""
    if not 0 <= index < size:
        return None
    fn, sn, r = index, size - 1, lh
    for p in proof:
        if sn == 0:
            return None
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            if not fn & 1:
                while not fn & 1 and fn != 0:
                    fn >>= 1
                    sn >>= 1
        else:
            r = node_hash(r, p)
        fn >>= 1
        sn >>= 1
    return r if sn == 0 else None


# ---------------------------------------------------------------------------------------------
# Checkpoint and keys ("The Merkle log and its signed checkpoints")
# ---------------------------------------------------------------------------------------------


class VerifierKey:
    def __init__(self, text: str):
        # "<name>+<key id, 8 lowercase hex>+<base64(0x01 || public key)>", split at the first two +
        parts = text.split("+", 2)
        if len(parts) != 3:
            raise ValueError("not name+id+key")
        self.name, idhex, b64 = parts
        if not self.name or any(c.isspace() or is_control(c) for c in self.name):
            raise ValueError("bad key name")
        if not re.fullmatch(r"[0-9a-f]{8}", idhex):
            raise ValueError("key id is not 8 lowercase hex digits")
        raw = b64_canonical(b64)
        if raw is None or len(raw) != 33 or raw[0] != 0x01:
            raise ValueError("key is not canonical base64 of 0x01 || 32-byte Ed25519 key")
        self.public = raw[1:]
        self.key_id = bytes.fromhex(idhex)
        computed = hashlib.sha256(self.name.encode("utf-8") + b"\x0a\x01" + self.public).digest()[
            :4
        ]
        if computed != self.key_id:
            raise ValueError(
                f"key id {idhex} is not SHA-256(name||0x0A||0x01||key)[:4] = {computed.hex()}"
            )
        self.text = text

    def same(self, other: VerifierKey) -> bool:
        return (self.name, self.key_id, self.public) == (other.name, other.key_id, other.public)


def parse_checkpoint(data: bytes):
    """C2SP signed note holding a tlog checkpoint; returns (body, origin, size, root, sigs)."""
    check = "checkpoint signature"
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        fail(check, "checkpoint.txt is not UTF-8")
        raise Stop
    if not text.endswith("\n") or any(is_control(c) and c != "\n" for c in text):
        fail(check, "the note must end with \\n and hold no control character but \\n")
        raise Stop
    cut = text.rfind("\n\n")
    if cut < 0:
        fail(check, "no blank line between body and signatures")
        raise Stop
    body, sig_text = text[: cut + 1], text[cut + 2 :]
    lines = body.split("\n")[:-1]
    if len(lines) != 3:
        fail(check, "the checkpoint body must be exactly three lines (no extension lines)")
        raise Stop
    origin, size_s, root_b64 = lines
    if not origin or not re.fullmatch(r"0|[1-9][0-9]*", size_s):
        fail(check, "bad origin or tree size line")
        raise Stop
    root = b64_canonical(root_b64)
    if root is None or len(root) != 32:
        fail(check, "the root is not canonical base64 of 32 bytes")
        raise Stop
    sig_lines = sig_text.split("\n")[:-1]
    if not sig_lines or len(sig_lines) > 100:
        fail(check, "a note needs 1 to 100 signature lines")
        raise Stop
    sigs = []
    for ln in sig_lines:
        if not ln.startswith("\u2014 "):
            fail(check, f"malformed signature line {ln!r}")
            raise Stop
        fields = ln[2:].split(" ")
        if (
            len(fields) != 2
            or not fields[0]
            or "+" in fields[0]
            or any(c.isspace() for c in fields[0])
        ):
            fail(check, f"malformed signature line {ln!r}")
            raise Stop
        blob = b64_canonical(fields[1])
        if blob is None or len(blob) < 5:
            fail(check, f"signature line {ln!r} is not canonical base64 of at least 5 bytes")
            raise Stop
        sigs.append((fields[0], blob))
    return body.encode("utf-8"), origin, int(size_s), root, sigs


def check_signature(body: bytes, sigs, bundled: VerifierKey) -> None:
    """A signature line of the bundled key's name and key id, verifying with Ed25519 over the
    body; lines of other keys are ignored (witnesses are not checked here)."""
    check = "checkpoint signature"
    pub = Ed25519PublicKey.from_public_bytes(bundled.public)
    mine = [blob for name, blob in sigs if name == bundled.name and blob[:4] == bundled.key_id]
    if not mine:
        fail(check, "no signature line of the key in verifier-key.txt")
        return
    for blob in mine:
        if len(blob) != 68:
            fail(check, "the log key's signature line is not key id || 64-byte signature")
            continue
        try:
            pub.verify(blob[4:], body)
        except InvalidSignature:
            fail(check, "the Ed25519 signature does not verify over the checkpoint body")


# ---------------------------------------------------------------------------------------------
# One trail ("Level 1", "Level 2", the bundle's per-trail members)
# ---------------------------------------------------------------------------------------------

TRAIL_MEMBERS = ["records.jsonl", "chain.json", "ledger-leaf.json", "inclusion-proof.json"]
TEXT_MEMBERS = ["disclosures.json", "prompt.txt", "answer.txt", "models.json", "params.json"]
ONE_TRAIL_MEMBERS = (
    TRAIL_MEMBERS
    + ["checkpoint.txt", "checkpoint.tsr", "verifier-key.txt"]
    + TEXT_MEMBERS
    + ["report.pdf", "verification.txt", "README.txt", "manifest.json"]
)
PER_TRAIL = TRAIL_MEMBERS + TEXT_MEMBERS
# Bundle format 6 adds receipt.cose and destruction.json after params.json ("The evidence bundle
# (bundle format 6)"; a matter bundle's trails/<id>/ holds "that trail's members exactly as a
# one-trail bundle holds them").
FORMAT6_MEMBERS = ["receipt.cose", "destruction.json"]
ONE_TRAIL_MEMBERS_6 = (
    TRAIL_MEMBERS
    + ["checkpoint.txt", "checkpoint.tsr", "verifier-key.txt"]
    + TEXT_MEMBERS
    + FORMAT6_MEMBERS
    + ["report.pdf", "verification.txt", "README.txt", "manifest.json"]
)
PER_TRAIL_6 = PER_TRAIL + FORMAT6_MEMBERS

LEAF_UNTAGGED = {"head", "job", "outcome", "records", "trail", "v"}
LEAF_TAGGED = LEAF_UNTAGGED | {"matter_tag", "sealed_at"}
LEAF_SELECTION = LEAF_TAGGED | {"batch_tag", "submitted_at"}
OUTCOMES = {"succeeded", "failed", "cancelled", "abandoned"}
DECISION_PARAMS = {
    "max_tokens",
    "temperature",
    "top_k",
    "top_p",
    "seed",
    "draft_length",
    "eos_token_id",
}
WORKINGS_REQUIRED = {
    "context_length",
    "draft_length",
    "drafted",
    "draft_source",
    "accepted_count",
    "correction",
    "emitted",
    "rationale",
    "timings_us",
}
WORKINGS_OPTIONAL = {"emitted_text", "logprobs", "target_top"}


def genesis_hash(trail_id: str) -> str:
    return sha256_hex(b"PF-GENESIS-v1\x00" + trail_id.encode("ascii"))


def record_hash(trail_id: str, seq: int, prev: str, payload: bytes) -> str:
    return sha256_hex(
        b"PF-RECORD-v1\x00"
        + trail_id.encode("ascii")
        + b"\x00"
        + str(seq).encode()
        + b"\x00"
        + prev.encode("ascii")
        + b"\x00"
        + payload
    )


def text_digest(salt: bytes, text: bytes) -> str:
    """digest(name) = SHA256("PF-TEXT-v2" || NUL || field_salt || NUL || UTF-8 text)."""
    return sha256_hex(b"PF-TEXT-v2\x00" + salt + b"\x00" + text)


def commitment(salt: bytes, value) -> str:
    """commitment = SHA256("PF-TOKEN-v3" || NUL || slot_salt || NUL || canonical JSON of value)."""
    return sha256_hex(b"PF-TOKEN-v3\x00" + salt + b"\x00" + canonical_bytes(value))


class Trail:
    """What a verified trail exposes to the matter checks."""

    trail_id: str | None = None
    fmt: int | None = None
    request: dict | None = None
    leaf: dict | None = None
    leaf_payload: bytes | None = None
    leaf_index: int | None = None
    leaf_kind: str | None = None
    proof: list[bytes] | None = None
    answer: dict | None = None
    decisions: list = []
    payloads: list = []
    head: str | None = None
    count: int = 0


def verify_trail(
    m: dict[str, bytes],
    prefix: str,
    cp_size: int,
    cp_root: bytes,
    fmt6: bool = False,
    origin: str | None = None,
    bundled: VerifierKey | None = None,
) -> Trail:
    """All one-trail checks on the members m[prefix + name] (with fmt6, also receipt.cose under
    the checkpoint of `origin` signed by the `bundled` key, and destruction.json)."""
    t = Trail()
    pre = f"trail {prefix[len('trails/') : -1]}: " if prefix else ""
    try:
        _verify_chain(t, m, prefix, pre)
    except Stop:
        return t
    except Exception as e:  # never let a malformed bundle crash the verifier
        fail(pre + "records and chain", f"malformed ({e!r})")
        return t
    for part in (_verify_leaf, _verify_inclusion, _verify_texts, _verify_models_params):
        try:
            part(t, m, prefix, pre, cp_size, cp_root)
        except Stop:
            pass
        except Exception as e:  # never let a malformed bundle crash the verifier
            fail(pre + part.__name__.strip("_").replace("_", " "), f"malformed ({e!r})")
    if fmt6:
        for name, run in (
            (
                "receipt",
                lambda: _verify_receipt(t, m, prefix, pre, cp_size, cp_root, origin, bundled),
            ),
            ("destruction", lambda: _verify_destruction(t, m, prefix, pre)),
        ):
            try:
                run()
            except Stop:
                pass
            except Exception as e:  # never let a malformed bundle crash the verifier
                fail(pre + name, f"malformed ({e!r})")
    return t


def _verify_chain(t: Trail, m, prefix, pre) -> None:
    """ "Level 1": canonical records, the hash chain, chain.json, record structure."""
    check = pre + "records and chain"
    chain = load_pretty(m[prefix + "chain.json"], check, "chain.json")
    if not isinstance(chain, dict) or set(chain) != {
        "format_version",
        "genesis_hash",
        "head_hash",
        "record_count",
        "records",
        "trail_id",
    }:
        fail(check, "chain.json does not hold exactly the doc's keys")
        raise Stop
    tid, fmt = chain["trail_id"], chain["format_version"]
    if not is_uuid(tid):
        fail(check, "trail_id is not a canonical lowercase UUID")
        raise Stop
    if not is_int(fmt) or not 1 <= fmt <= 5:
        fail(check, f"format_version {fmt!r} is not 1 to 5")
        raise Stop
    t.trail_id, t.fmt = tid, fmt
    raw = m[prefix + "records.jsonl"]
    if raw and not raw.endswith(b"\n"):
        fail(check, "records.jsonl does not end with \\n")
        raise Stop
    lines = raw.split(b"\n")[:-1] if raw else []
    payloads = []
    for i, line in enumerate(lines):
        payloads.append(load_canonical(line, check, f"record seq {i}"))
    g = genesis_hash(tid)
    require(
        chain["genesis_hash"] == g,
        check,
        "genesis_hash is not SHA256(PF-GENESIS-v1||NUL||trail_id)",
    )
    entries = chain["records"]
    if not isinstance(entries, list) or len(entries) != len(lines):
        fail(check, "chain.json's records do not match records.jsonl's lines")
        raise Stop
    prev = g
    for i, (line, e) in enumerate(zip(lines, entries, strict=False)):
        h = record_hash(tid, i, prev, line)
        if e != {"prev_hash": prev, "record_hash": h, "seq": i}:
            fail(
                check, f"record seq {i}: chain entry does not recompute (prev_hash/record_hash/seq)"
            )
            raise Stop
        prev = h
    require(chain["head_hash"] == prev, check, "head_hash is not the last record_hash")
    require(chain["record_count"] == len(lines), check, "record_count is not the number of records")
    for i, p in enumerate(payloads):
        if not isinstance(p, dict) or p.get("v") != fmt:
            fail(check, f"record seq {i}: v is not chain.json's format_version {fmt}")
            raise Stop
    t.head, t.count, t.payloads = prev, len(lines), payloads
    _record_structure(t, pre)


def _record_structure(t: Trail, pre) -> None:
    """Request first, decisions agreeing with it, answer last ("Level 1" tables)."""
    check = pre + "ledger leaf"  # the doc reports record structure under "ledger leaf"
    p, fmt = t.payloads, t.fmt
    t.decisions, t.answer = [], None
    if fmt == 1:
        for i, d in enumerate(p):
            require(
                "kind" not in d and d.get("step") == i,
                check,
                f"format-1 record seq {i} must be a decision with step = seq and no kind",
            )
        t.decisions = p
        return
    if not p:
        return
    req = p[0]
    if req.get("kind") != "request":
        fail(check, "the first record is not the request record")
        raise Stop
    t.request = req
    for k in ("job", "matter", "attempt", "previous_trail", "models", "params", "prompt"):
        if k not in req:
            fail(check, f"the request record has no {k}")
            raise Stop
    require(is_uuid(req["job"]), check, "the request's job is not a UUID")
    require(isinstance(req["matter"], str), check, "the request's matter is not a string")
    require(
        is_int(req["attempt"]) and req["attempt"] >= 1,
        check,
        "the request's attempt is not 1, 2, ...",
    )
    require(
        req["previous_trail"] is None or is_uuid(req["previous_trail"]),
        check,
        "previous_trail is neither null nor a UUID",
    )
    if "submitted_at" in req:
        require(
            is_utc_time(req["submitted_at"]), check, "the request's submitted_at is not a UTC time"
        )
    if "batch_line" in req:  # a Batch API line's job: {batch, line, custom_id}
        line = req["batch_line"]
        require(
            isinstance(line, dict)
            and sorted(line) == ["batch", "custom_id", "line"]
            and isinstance(line["batch"], str)
            and line["batch"] != ""
            and is_int(line["line"])
            and line["line"] >= 1
            and (line["custom_id"] is None or isinstance(line["custom_id"], str)),
            check,
            "the request's batch_line is not {batch, line, custom_id}",
        )
    prompt = req["prompt"]
    if not isinstance(prompt, dict) or not isinstance(prompt.get("digests"), dict):
        fail(check, "the request's prompt has no digests")
        raise Stop
    if fmt >= 4:  # format 5 records as format 4 does; only its decision rule differs
        require("token_count" not in prompt, check, "a format-4 request states prompt.token_count")
    else:
        require(is_int(prompt.get("token_count")), check, "the request has no prompt.token_count")
    params = req["params"]
    if not isinstance(params, dict):
        fail(check, "the request's params are not an object")
        raise Stop
    want_params = {k: params.get(k) for k in DECISION_PARAMS}
    rest = p[1:]
    if rest and rest[-1].get("kind") == "answer":
        t.answer, rest = rest[-1], rest[:-1]
    for i, d in enumerate(rest, start=1):
        if d.get("kind") != "decision":
            fail(check, f"record seq {i} is not a decision (or a record follows the answer)")
            raise Stop
        require(d.get("step") == i - 1, check, f"record seq {i}: step is not seq - 1")
        require(
            d.get("request_id") == req["job"],
            check,
            f"record seq {i}: request_id is not the request's job",
        )
        require(
            d.get("params") == want_params,
            check,
            f"record seq {i}: params differ from the request's",
        )
        require(
            d.get("draft") == req["models"].get("draft")
            and d.get("target") == req["models"].get("target"),
            check,
            f"record seq {i}: models differ from the request's",
        )
    t.decisions = rest
    if t.answer is not None:
        a = t.answer
        require(
            a.get("steps") == len(rest), check, "the answer's steps is not the number of decisions"
        )
        last_stop = rest[-1].get("stop") if rest else None
        require(
            a.get("stop_reason") in (last_stop, "cancelled") and a.get("stop_reason") is not None,
            check,
            "the answer's stop_reason is neither the last decision's stop nor cancelled",
        )
        if fmt == 2:
            emitted = [tok for d in rest for tok in (d.get("emitted") or [])]
            require(
                a.get("output_token_ids") == emitted,
                check,
                "the answer's output_token_ids are not the decisions' emitted lists",
            )
        if fmt == 3:
            require(
                a.get("output_token_count") == sum(d.get("emitted_count", 0) for d in rest),
                check,
                "the answer's output_token_count is not the sum of emitted_count",
            )


def _leaf_keys_ok(leaf) -> str | None:
    ks = set(leaf)
    return {
        frozenset(LEAF_UNTAGGED): "untagged",
        frozenset(LEAF_TAGGED): "tagged",
        frozenset(LEAF_SELECTION): "selection",
    }.get(frozenset(ks))


def _verify_leaf(t: Trail, m, prefix, pre, cp_size, cp_root) -> None:
    """ "Level 2": the leaf seals this trail; tagged / selection leaf rules."""
    check = pre + "ledger leaf"
    ll = load_pretty(m[prefix + "ledger-leaf.json"], check, "ledger-leaf.json")
    if (
        not isinstance(ll, dict)
        or set(ll) != {"index", "payload"}
        or not is_int(ll["index"])
        or ll["index"] < 0
        or not isinstance(ll["payload"], str)
    ):
        fail(check, "ledger-leaf.json is not {index, payload}")
        raise Stop
    payload = ll["payload"].encode("utf-8")
    leaf = load_canonical(payload, check, "the ledger payload")
    t.leaf, t.leaf_payload, t.leaf_index = leaf, payload, ll["index"]
    kind = _leaf_keys_ok(leaf) if isinstance(leaf, dict) else None
    if kind is None:
        fail(check, "the ledger payload is not one of the three key sets")
        raise Stop
    t.leaf_kind = kind
    require(leaf["trail"] == t.trail_id, check, "the leaf does not seal this trail's id")
    require(leaf["v"] == t.fmt, check, "the leaf's v is not the trail's format version")
    require(leaf["records"] == t.count, check, "the leaf's record count is not the chain's")
    require(leaf["head"] == t.head, check, "the leaf's head is not the chain's head")
    require(leaf["outcome"] in OUTCOMES, check, f"outcome {leaf['outcome']!r} refused")
    require(is_uuid(leaf["job"]), check, "the leaf's job is not a UUID")
    if t.request is not None:
        require(
            leaf["job"] == t.request["job"], check, "the leaf's job is not the request record's job"
        )
    # An answer record exactly when the outcome says one was served ("Level 1").
    if t.fmt >= 2 and t.count:
        served = leaf["outcome"] in ("succeeded", "cancelled")
        require(
            served == (t.answer is not None),
            check,
            f"outcome {leaf['outcome']!r} but the trail {'has no' if served else 'has an'} answer record",
        )
    if kind in ("tagged", "selection"):
        require(is_utc_time(leaf["sealed_at"]), check, "sealed_at is not a UTC time")
        tag = leaf["matter_tag"]
        require(
            (tag is None) == (t.request is None),
            check,
            "matter_tag must be null exactly when the trail has no request record",
        )
        require(tag is None or is_hex64(tag), check, "matter_tag is not 64 lowercase hex digits")
    if kind == "selection":
        nulls = (leaf["submitted_at"] is None, leaf["batch_tag"] is None)
        require(
            nulls == (leaf["matter_tag"] is None,) * 2,
            check,
            "submitted_at and batch_tag must be null exactly when matter_tag is",
        )
        if leaf["submitted_at"] is not None:
            require(
                is_utc_time(leaf["submitted_at"]),
                check,
                "the leaf's submitted_at is not a UTC time",
            )
            require(
                leaf["batch_tag"] is None or is_hex64(leaf["batch_tag"]),
                check,
                "batch_tag is not 64 lowercase hex digits",
            )
            require(
                t.request is not None and leaf["submitted_at"] == t.request.get("submitted_at"),
                check,
                "the leaf's submitted_at is not the request record's",
            )


def _verify_inclusion(t: Trail, m, prefix, pre, cp_size, cp_root) -> None:
    """Leaf hash and RFC 9162 inclusion proof to the checkpoint's root."""
    check = pre + "inclusion proof"
    ip = load_pretty(m[prefix + "inclusion-proof.json"], check, "inclusion-proof.json")
    if (
        not isinstance(ip, dict)
        or set(ip) != {"leaf_hash", "leaf_index", "proof", "tree_size"}
        or not isinstance(ip["proof"], list)
        or not all(is_hex64(h) for h in ip["proof"])
        or not is_hex64(ip["leaf_hash"])
    ):
        fail(check, "inclusion-proof.json is not of the doc's form")
        raise Stop
    if t.leaf_payload is None:
        fail(check, "no ledger leaf to prove")
        raise Stop
    t.proof = [bytes.fromhex(h) for h in ip["proof"]]
    lh = leaf_hash(t.leaf_payload)
    require(
        ip["leaf_hash"] == lh.hex(), pre + "leaf hash", "leaf_hash is not SHA-256(0x00 || payload)"
    )
    require(ip["leaf_index"] == t.leaf_index, check, "leaf_index is not ledger-leaf.json's index")
    require(ip["tree_size"] == cp_size, check, "tree_size is not the checkpoint's size")
    root = root_from_inclusion(t.leaf_index, cp_size, lh, [bytes.fromhex(h) for h in ip["proof"]])
    require(root == cp_root, check, "the audit path does not lead to the checkpoint's root")


def _verify_texts(t: Trail, m, prefix, pre, cp_size, cp_root) -> None:
    """disclosures.json, prompt.txt, answer.txt ("Bound texts and their salts", format 3/4
    openings)."""
    check = pre + "question and answer"
    disc = load_pretty(m[prefix + "disclosures.json"], check, "disclosures.json")
    prompt_txt, answer_txt = m[prefix + "prompt.txt"], m[prefix + "answer.txt"]
    if not isinstance(disc, dict):
        fail(check, "disclosures.json is not an object")
        raise Stop
    req, ans = t.request, t.answer
    if t.fmt == 1 or req is None:
        require(disc == {}, check, "disclosures.json must be {} without a request record")
        require(
            prompt_txt == b"" and answer_txt == b"",
            check,
            "prompt.txt / answer.txt must be empty when no record binds them",
        )
        return
    # The bound fields and the digest each is checked against.
    bound: dict[str, str] = {}
    for name, dg in req["prompt"]["digests"].items():
        bound[name] = dg
    if ans is not None:
        bound["answer.text"] = ans.get("output_text_digest")
        if t.fmt >= 3:
            bound["answer.token_ids"] = ans.get("output_token_ids_digest")
    slots = {k for k in disc if k.startswith("step.")} if t.fmt >= 3 else set()
    if set(disc) != set(bound) | slots:
        fail(
            check,
            f"disclosures.json's entries are not exactly the bound fields {sorted(bound)}"
            f"{' and slot openings' if t.fmt >= 3 else ''}",
        )
        raise Stop
    value_form = {"prompt.given", "prompt.token_ids", "answer.token_ids"}
    disclosed: dict[str, object] = {}
    for name, dg in bound.items():
        e = disc[name]
        if e == {"withheld": True}:
            continue
        want = {"salt", "value"} if name in value_form else {"salt"}
        if not isinstance(e, dict) or set(e) != want or not is_hex64(e.get("salt")):
            fail(check, f"{name}: entry is neither {{withheld: true}} nor {sorted(want)}")
            continue
        salt = bytes.fromhex(e["salt"])
        if name == "prompt.rendered":
            text = prompt_txt
        elif name == "answer.text":
            text = answer_txt
        elif name in value_form:
            text = canonical_bytes(e["value"])
        else:
            fail(check, f"unknown bound field {name}")
            continue
        if not require(
            is_hex64(dg) and text_digest(salt, text) == dg,
            check,
            f"{name}: the disclosed text does not match its salted digest",
        ):
            continue
        disclosed[name] = e.get("value", text)
    # Withheld texts are empty; a text no record binds is empty too.
    if "prompt.rendered" not in disclosed:
        require(prompt_txt == b"", check, "prompt.txt must be empty (withheld or unbound)")
    if "answer.text" not in disclosed:
        require(answer_txt == b"", check, "answer.txt must be empty (withheld or unbound)")
    for name in ("prompt.token_ids", "answer.token_ids"):
        if name in disclosed:
            v = disclosed[name]
            require(
                isinstance(v, list) and all(is_int(x) for x in v),
                check,
                f"{name} is not a list of ids",
            )
    if "prompt.token_ids" in disclosed and "token_count" in req["prompt"]:
        require(
            len(disclosed["prompt.token_ids"]) == req["prompt"]["token_count"],
            check,
            "prompt.token_ids' length is not the request's token_count",
        )
    if t.fmt == 3:
        _format3_slots(t, disc, slots, disclosed, check)
    elif t.fmt >= 4:
        _format4_workings(t, disc, slots, disclosed, check)


def _opening(disc, name, check):
    e = disc[name]
    if not isinstance(e, dict) or set(e) != {"salt", "value"} or not is_hex64(e["salt"]):
        fail(check, f"{name}: an opening must be {{salt, value}}")
        return None
    return bytes.fromhex(e["salt"]), e["value"]


def _format3_slots(t: Trail, disc, slots, disclosed, check) -> None:
    """ "Format 3: sealed tokens": each opened slot is one a decision commits to and opens it;
    a disclosed answer.token_ids is exactly the emitted slots, opened."""
    by_step = {d.get("step"): d for d in t.decisions}
    opened: dict[str, object] = {}
    for name in sorted(slots):
        mt = re.fullmatch(
            r"step\.(0|[1-9]\d*)\.(drafted\.(0|[1-9]\d*)|correction|top\.(0|[1-9]\d*))", name
        )
        d = by_step.get(int(mt.group(1))) if mt else None
        try:
            if d is None:
                raise LookupError
            if mt.group(2) == "correction":
                com = d["correction"]["commitment"]
            elif mt.group(3) is not None:
                com = d["drafted"][int(mt.group(3))]["commitment"]
            else:
                com = d["target_top"][int(mt.group(4))]
        except (LookupError, TypeError):
            fail(check, f"{name} is not a slot of the trail's decisions")
            continue
        o = _opening(disc, name, check)
        if o is None:
            continue
        salt, value = o
        if mt.group(4) is None:
            ok_form = (
                isinstance(value, dict)
                and set(value) in ({"token"}, {"token", "text"})
                and is_int(value["token"])
            )
        else:
            ok_form = isinstance(value, list)
        if not require(ok_form, check, f"{name}: the value is not of its slot's form"):
            continue
        if require(
            commitment(salt, value) == com,
            check,
            f"{name}: the opening does not open its commitment",
        ):
            opened[name] = value
    if "answer.token_ids" in disclosed:
        emitted = []
        for d in t.decisions:
            s, k = d.get("step"), d.get("accepted_count", 0)
            names = [f"step.{s}.drafted.{i}" for i in range(k)] + [f"step.{s}.correction"]
            for n in names[: d.get("emitted_count", 0)]:
                if n not in opened:
                    fail(check, f"answer.token_ids is disclosed but emitted slot {n} is not opened")
                    return
                emitted.append(opened[n]["token"])
        require(
            emitted == disclosed["answer.token_ids"],
            check,
            "answer.token_ids is not the emitted slots, opened",
        )


def _format4_workings(t: Trail, disc, slots, disclosed, check) -> None:
    """ "Format 4: sealed workings": each opened step.<s>.workings opens its commitment to an
    object of the doc's keys; with every decision opened, answer.token_ids is what they emitted."""
    by_step = {d.get("step"): d for d in t.decisions}
    opened = {}
    for name in sorted(slots):
        mt = re.fullmatch(r"step\.(0|[1-9]\d*)\.workings", name)
        d = by_step.get(int(mt.group(1))) if mt else None
        if d is None:
            fail(check, f"{name} is not a slot of the trail's decisions")
            continue
        o = _opening(disc, name, check)
        if o is None:
            continue
        salt, value = o
        if not require(
            isinstance(value, dict)
            and WORKINGS_REQUIRED <= set(value) <= WORKINGS_REQUIRED | WORKINGS_OPTIONAL,
            check,
            f"{name}: the workings are not an object of the doc's keys",
        ):
            continue
        if require(
            commitment(salt, value) == d.get("workings"),
            check,
            f"{name}: the opening does not open its commitment",
        ):
            opened[d.get("step")] = value
    if t.decisions and len(opened) == len(t.decisions) and "answer.token_ids" in disclosed:
        emitted = [tok for d in t.decisions for tok in opened[d.get("step")]["emitted"]]
        require(
            emitted == disclosed["answer.token_ids"],
            check,
            "answer.token_ids is not the opened decisions' emitted tokens",
        )


def _verify_models_params(t: Trail, m, prefix, pre, cp_size, cp_root) -> None:
    """models.json and params.json: exactly the bytes the first record makes."""
    check = pre + "models and params"
    if t.fmt == 1 and t.payloads:
        first = t.payloads[0]
        models = {"draft": first.get("draft"), "target": first.get("target")}
        params = first.get("params")
    elif t.request is not None:
        models = t.request["models"]
        params = t.request["params"]
    else:
        models, params = {"draft": None, "target": None}, {}
    try:
        want_m = (pretty(models) + "\n").encode("utf-8")
        want_p = (pretty(params) + "\n").encode("utf-8")
    except (JSONError, UnicodeEncodeError) as e:
        fail(check, f"the first record's models/params cannot be written ({e})")
        return
    require(
        m[prefix + "models.json"] == want_m, check, "models.json is not what the first record names"
    )
    require(
        m[prefix + "params.json"] == want_p, check, "params.json is not what the first record names"
    )


# ---------------------------------------------------------------------------------------------
# Bundle format 6: receipt.cose ("COSE Receipts (RFC 9942)") and destruction.json
# ---------------------------------------------------------------------------------------------


class CborTag:
    def __init__(self, tag: int, value):
        self.tag, self.value = tag, value


def _cbor_head(major: int, n: int) -> bytes:
    """RFC 8949 section 4.2.1: the shortest head for the argument n."""
    if n < 24:
        return bytes([major << 5 | n])
    for extra, width in ((24, 1), (25, 2), (26, 4), (27, 8)):
        if n < 1 << (8 * width):
            return bytes([major << 5 | extra]) + n.to_bytes(width, "big")
    raise ValueError(f"CBOR argument {n} too large")


def cbor(v) -> bytes:
    """Deterministic CBOR (RFC 8949 section 4.2.1): shortest heads, definite lengths, map keys
    in the bytewise order of their encodings. Only what a receipt holds."""
    if v is None:
        return b"\xf6"
    if is_int(v):
        return _cbor_head(0, v) if v >= 0 else _cbor_head(1, -1 - v)
    if isinstance(v, bytes):
        return _cbor_head(2, len(v)) + v
    if isinstance(v, str):
        b = v.encode("utf-8")
        return _cbor_head(3, len(b)) + b
    if isinstance(v, list):
        return _cbor_head(4, len(v)) + b"".join(cbor(x) for x in v)
    if isinstance(v, dict):
        items = sorted((cbor(k), cbor(x)) for k, x in v.items())
        if len({k for k, _ in items}) != len(items):
            raise ValueError("duplicate CBOR map key")
        return _cbor_head(5, len(items)) + b"".join(k + x for k, x in items)
    if isinstance(v, CborTag):
        return _cbor_head(6, v.tag) + cbor(v.value)
    raise ValueError(f"no CBOR form for {type(v).__name__}")


def receipt_protected(kid: bytes, origin: str) -> bytes:
    """The protected header: {1: -8 (EdDSA), 4: kid, 15: {1: iss}, 395: 1 (RFC9162_SHA256)}."""
    return cbor({1: -8, 4: kid, 15: {1: origin}, 395: 1})


def receipt_bytes(
    kid: bytes, origin: str, tree_size: int, leaf_index: int, path: list[bytes], sig: bytes
) -> bytes:
    """18([<<protected>>, {396: {-1: [<<[tree_size, leaf_index, path]>>]}}, nil, signature])."""
    proof = cbor([tree_size, leaf_index, list(path)])
    return cbor(CborTag(18, [receipt_protected(kid, origin), {396: {-1: [proof]}}, None, sig]))


def receipt_to_be_signed(protected: bytes, root: bytes) -> bytes:
    """The Sig_structure ["Signature1", protected header bytes, h'', root] (RFC 9052)."""
    return cbor(["Signature1", protected, b"", root])


def _verify_receipt(
    t: Trail, m, prefix, pre, cp_size, cp_root, origin, bundled: VerifierKey | None
) -> None:
    """receipt.cose: exactly the receipt of this leaf under the checkpoint (iss its origin, kid the
    bundled key's id, tree_size its size, the ledger leaf's index, inclusion-proof.json's path),
    its Ed25519 signature over the Sig_structure with the checkpoint's root verifying."""
    check = pre + "receipt"
    data = m[prefix + "receipt.cose"]
    if not data:
        skip(check, "receipt.cose is empty (the checkpoint has no receipt signature)")
        return
    if bundled is None:
        fail(check, "no verifier key in verifier-key.txt to check the receipt with")
        return
    if t.leaf_payload is None or t.leaf_index is None or t.proof is None:
        fail(check, "no verified ledger leaf and inclusion proof to make the receipt of")
        return
    lh = leaf_hash(t.leaf_payload)
    if not require(
        root_from_inclusion(t.leaf_index, cp_size, lh, t.proof) == cp_root,
        check,
        "the leaf and inclusion-proof.json's path do not fold to the checkpoint's root",
    ):
        return
    if len(data) < 64:
        fail(check, "receipt.cose is shorter than a signature")
        return
    sig = data[-64:]
    want = receipt_bytes(bundled.key_id, origin, cp_size, t.leaf_index, t.proof, sig)
    if not require(
        data == want,
        check,
        "receipt.cose is not the receipt of this leaf under the checkpoint (kid, iss, tree_size, "
        "leaf_index, path) in the doc's deterministic CBOR",
    ):
        return
    tbs = receipt_to_be_signed(receipt_protected(bundled.key_id, origin), cp_root)
    try:
        Ed25519PublicKey.from_public_bytes(bundled.public).verify(sig, tbs)
    except InvalidSignature:
        fail(check, "the receipt's Ed25519 signature does not verify over the checkpoint's root")


def _is_withheld(v) -> bool:
    return isinstance(v, dict) and set(v) == {"withheld"} and v["withheld"] is True


DESTROYED_AT_RE = re.compile(r"\A\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z\Z")


def _verify_destruction(t: Trail, m, prefix, pre) -> None:
    """destruction.json: {"destroyed": false}, or destroyed true with destroyed_at (to the second,
    UTC), destroyed_by and order; a destroyed trail discloses nothing."""
    check = pre + "destruction"
    d = load_pretty(m[prefix + "destruction.json"], check, "destruction.json")
    if d == {"destroyed": False} and d["destroyed"] is False:
        return
    keys = {"destroyed", "destroyed_at", "destroyed_by", "order"}
    if not isinstance(d, dict) or set(d) != keys or d["destroyed"] is not True:
        fail(
            check,
            'destruction.json is neither {"destroyed": false} nor '
            "{destroyed: true, destroyed_at, destroyed_by, order}",
        )
        return
    at = d["destroyed_at"]
    ok_at = isinstance(at, str) and bool(DESTROYED_AT_RE.match(at))
    if ok_at:
        try:
            datetime.strptime(at, "%Y-%m-%dT%H:%M:%SZ")
        except ValueError:
            ok_at = False
    require(ok_at, check, "destroyed_at is not a UTC time YYYY-MM-DDTHH:MM:SSZ")
    for k in ("destroyed_by", "order"):
        require(isinstance(d[k], str) and d[k] != "", check, f"{k} is not a non-empty string")
    # A destroyed trail discloses nothing: every entry withheld, the text members empty.
    disc = load_pretty(m[prefix + "disclosures.json"], check, "disclosures.json")
    open_ = None
    if isinstance(disc, dict):
        open_ = sorted(k for k, v in disc.items() if not _is_withheld(v))
    require(
        open_ == [],
        check,
        f"the trail's texts were destroyed, but disclosures.json discloses {open_}",
    )
    require(
        m[prefix + "prompt.txt"] == b"" and m[prefix + "answer.txt"] == b"",
        check,
        "the trail's texts were destroyed, but prompt.txt or answer.txt is not empty",
    )


# ---------------------------------------------------------------------------------------------
# Matter bundles ("The matter bundle (matter format 3)", "Older matter formats", Level 2 tags)
# ---------------------------------------------------------------------------------------------

REASONS = {"open", "sealed_after_checkpoint", "no_request", "outside_selection"}
MATTER_KEYS = {
    1: {"format_version", "matter", "since", "until", "tree_size", "trails", "left_out"},
    2: {
        "format_version",
        "matter",
        "matter_key",
        "since",
        "until",
        "tree_size",
        "trails",
        "left_out",
    },
    3: {
        "format_version",
        "matter",
        "matter_key",
        "batch",
        "since",
        "until",
        "tree_size",
        "trails",
        "left_out",
    },
}
LISTING_KEYS = {"trail_id", "job_id", "attempt", "outcome", "abandoned", "leaf_index"}


def matter_tag(key: bytes, trail_id: str) -> str:
    return hmac.new(
        key, b"PF-MATTER-TAG-v1\x00" + trail_id.encode("ascii"), hashlib.sha256
    ).hexdigest()


def batch_tag(key: bytes, trail_id: str, batch: str) -> str:
    return hmac.new(
        key,
        b"PF-BATCH-TAG-v1\x00" + trail_id.encode("ascii") + b"\x00" + batch.encode("utf-8"),
        hashlib.sha256,
    ).hexdigest()


def load_matter(data: bytes) -> dict:
    """matter.json's form (the doc's keys for matter formats 1 to 3, "The rules of matter.json")."""
    check = "matter.json"
    mj = load_pretty(data, check, "matter.json")
    if (
        not isinstance(mj, dict)
        or mj.get("format_version") not in MATTER_KEYS
        or not is_int(mj.get("format_version"))
    ):
        fail(check, "format_version is not a matter format 1, 2 or 3")
        raise Stop
    fmt = mj["format_version"]
    if set(mj) != MATTER_KEYS[fmt]:
        fail(check, f"matter format {fmt} must hold exactly {sorted(MATTER_KEYS[fmt])}")
        raise Stop
    ok = True
    ok &= require(isinstance(mj["matter"], str), check, "matter is not a string")
    if fmt >= 2:
        ok &= require(
            is_hex64(mj["matter_key"]), check, "matter_key is not 64 lowercase hex digits"
        )
    if fmt == 3:
        ok &= require(
            mj["batch"] is None or isinstance(mj["batch"], str),
            check,
            "batch is not a string or null",
        )
    for k in ("since", "until"):
        ok &= require(mj[k] is None or is_day(mj[k]), check, f"{k} is neither null nor YYYY-MM-DD")
    ok &= require(is_int(mj["tree_size"]), check, "tree_size is not an integer")
    trails, left = mj["trails"], mj["left_out"]
    if not isinstance(trails, list) or not trails:
        fail(check, "trails must be a non-empty list")
        raise Stop
    if not isinstance(left, list):
        fail(check, "left_out must be a list")
        raise Stop
    last = -1
    for e in trails:
        if (
            not isinstance(e, dict)
            or set(e) != LISTING_KEYS
            or not is_uuid(e["trail_id"])
            or not is_uuid(e["job_id"])
            or not is_int(e["attempt"])
            or e["attempt"] < 1
            or e["outcome"] not in OUTCOMES
            or not is_int(e["leaf_index"])
        ):
            fail(check, f"listed trail {e!r} is not of the doc's form")
            raise Stop
        ok &= require(
            e["abandoned"] is (e["outcome"] == "abandoned"),
            check,
            f'trail {e["trail_id"]}: abandoned must be outcome == "abandoned"',
        )
        ok &= require(
            e["leaf_index"] > last,
            check,
            "trails are not in log order (leaf_index strictly increasing)",
        )
        last = e["leaf_index"]
    for e in left:
        if (
            not isinstance(e, dict)
            or set(e) != {"trail_id", "job_id", "reason"}
            or not is_uuid(e["trail_id"])
            or not is_uuid(e["job_id"])
            or not isinstance(e["reason"], str)
        ):
            fail(check, f"left_out entry {e!r} is not of the doc's form")
            raise Stop
        if fmt == 3:
            ok &= require(
                e["reason"] in REASONS,
                check,
                f"left_out reason {e['reason']!r} is not one of the four codes",
            )
    ids = [e["trail_id"] for e in trails]
    lids = [e["trail_id"] for e in left]
    ok &= require(len(set(ids)) == len(ids), check, "a trail is listed twice")
    ok &= require(len(set(lids)) == len(lids), check, "a trail is left out twice")
    ok &= require(not set(ids) & set(lids), check, "a trail is both in the bundle and left out")
    return mj


def in_days(day: str, since, until) -> bool:
    return (since is None or day >= since) and (until is None or day <= until)


def verify_matter_listings(mj: dict, trails: dict[str, Trail], cp_size: int) -> None:
    """Per listed trail: the listing is this trail's, of this matter; matter format vs leaves;
    the selection; attempts."""
    fmt = mj["format_version"]
    key = bytes.fromhex(mj["matter_key"]) if fmt >= 2 else None
    require(mj["tree_size"] == cp_size, "matter.json", "tree_size is not the checkpoint's size")
    for e in mj["trails"]:
        tid = e["trail_id"]
        t = trails[tid]
        check = f"trail {tid}: listing"
        if t.trail_id != tid:
            fail(check, "the chain under trails/<id>/ is not of that trail id")
            continue
        if t.leaf is None:
            fail(check, "no verifiable ledger leaf")
            continue
        leaf = t.leaf
        require(
            t.leaf_index == e["leaf_index"],
            check,
            "ledger-leaf.json's index is not the listed leaf_index",
        )
        require(leaf["job"] == e["job_id"], check, "the leaf does not seal the listed job")
        require(
            leaf["outcome"] == e["outcome"], check, "the leaf's outcome is not the listed outcome"
        )
        if t.request is None:
            fail(check, "the trail has no request record (refused in a matter bundle)")
            continue
        require(
            t.request["matter"] == mj["matter"], check, "its request record names another matter"
        )
        require(
            t.request["attempt"] == e["attempt"], check, "its request record names another attempt"
        )
        # A bundle cannot claim a matter format below its leaves' ("Older matter formats").
        need = {"untagged": 1, "tagged": 2, "selection": 3}[t.leaf_kind]
        if not require(
            fmt >= need, check, f"a {t.leaf_kind} leaf needs matter format {need}, not {fmt}"
        ):
            continue
        if fmt == 1:
            continue
        if t.leaf_kind != "untagged":
            require(
                leaf["matter_tag"] == matter_tag(key, tid),
                check,
                "the leaf's matter_tag is not HMAC(matter_key, PF-MATTER-TAG-v1||NUL||trail)",
            )
        # The selection, by what is signed ("The selection").
        sub = leaf["submitted_at"] if t.leaf_kind == "selection" else t.request.get("submitted_at")
        if mj["since"] is not None or mj["until"] is not None:
            if not require(sub is not None, check, "no submitted_at to hold to since/until"):
                continue
            require(
                in_days(sub[:10], mj["since"], mj["until"]),
                check,
                f"submitted {sub} is outside the selection {mj['since']} .. {mj['until']}",
            )
        if fmt == 3 and mj["batch"] is not None:
            require(
                t.leaf_kind == "selection"
                and leaf["batch_tag"] == batch_tag(key, tid, mj["batch"]),
                check,
                f"the leaf's batch_tag does not show a line of batch {mj['batch']!r}",
            )
    # Attempts ("The rules of matter.json", **Attempts**).
    listed = {e["trail_id"]: e for e in mj["trails"]}
    left = {e["trail_id"]: e for e in mj["left_out"]}
    for e in mj["trails"]:
        t = trails[e["trail_id"]]
        if t.request is None:
            continue
        prev = t.request["previous_trail"]
        check = f"trail {e['trail_id']}: attempts"
        if e["attempt"] == 1:
            require(prev is None, check, "attempt 1 names a previous_trail")
        elif prev is None:
            fail(check, "a later attempt names no previous_trail")
        else:
            # previous_trail is a listed trail of the same job at attempt - 1, or a left-out
            # entry (that trail id) with the same job_id.
            p, q = listed.get(prev), left.get(prev)
            ok = (
                p is not None and p["job_id"] == e["job_id"] and p["attempt"] == e["attempt"] - 1
            ) or (q is not None and q["job_id"] == e["job_id"])
            require(
                ok,
                check,
                "previous_trail is neither a listed attempt - 1 of the job nor a "
                "left-out trail of the job",
            )


# ---------------------------------------------------------------------------------------------
# Completeness against the log's tiles ("The log over HTTP", "Why a trail is left out")
# ---------------------------------------------------------------------------------------------


def tile_index_path(n: int) -> str:
    """N in 3-digit groups, all but the last prefixed with x (1234067 -> x001/x234/067)."""
    s = str(n)
    s = "0" * (-len(s) % 3) + s
    groups = [s[i : i + 3] for i in range(0, len(s), 3)]
    return "/".join(["x" + g for g in groups[:-1]] + [groups[-1]])


def fetch(log: str, rel: str) -> bytes:
    if re.match(r"https?://", log):
        with urllib.request.urlopen(log.rstrip("/") + "/" + rel, timeout=60) as r:
            return r.read()
    with open(os.path.join(log, *rel.split("/")), "rb") as f:
        return f.read()


def read_leaves(log: str, size: int) -> list[bytes]:
    leaves: list[bytes] = []
    full, partial = divmod(size, 256)
    tiles = [(n, 256, f"tile/entries/{tile_index_path(n)}") for n in range(full)]
    if partial:
        tiles.append((full, partial, f"tile/entries/{tile_index_path(full)}.p/{partial}"))
    for _n, width, rel in tiles:
        data = fetch(log, rel)
        pos, got = 0, []
        while pos < len(data):
            if pos + 2 > len(data):
                raise ValueError(f"{rel}: truncated length prefix")
            (ln,) = struct.unpack_from(">H", data, pos)
            pos += 2
            if pos + ln > len(data):
                raise ValueError(f"{rel}: truncated entry")
            got.append(data[pos : pos + ln])
            pos += ln
        if len(got) != width:
            raise ValueError(f"{rel}: {len(got)} entries, expected {width}")
        leaves.extend(got)
    return leaves


def legacy_reason(text: str) -> str | None:
    """Matter format 2's reason texts, matched by their first words ("Older matter formats")."""
    for prefix, code in (
        ("still open", "open"),
        ("sealed after the checkpoint", "sealed_after_checkpoint"),
        ("outside the selection", "outside_selection"),
    ):
        if text.startswith(prefix):
            return code
    return None


def check_completeness(
    mj: dict, trails: dict[str, Trail], log: str, cp_size: int, cp_root: bytes
) -> None:
    check = "completeness"
    try:
        raw = read_leaves(log, cp_size)
    except Exception as e:
        fail(check, f"cannot read the log's entry tiles ({e})")
        return
    if not require(
        mth([leaf_hash(d) for d in raw]) == cp_root,
        check,
        "the log's leaves up to the checkpoint do not make its root",
    ):
        return
    leaves = []
    for i, d in enumerate(raw):
        try:
            v = parse_json(d)
            if canonical_bytes(v) != d or not isinstance(v, dict) or _leaf_keys_ok(v) is None:
                raise JSONError("not a canonical ledger payload of the doc's key sets")
        except (JSONError, UnicodeEncodeError) as e:
            fail(check, f"log leaf {i} is not a ledger payload ({e})")
            return
        leaves.append(v)
    fmt = mj["format_version"]
    # Listed trails: the log's leaf at leaf_index is the bundle's.
    for e in mj["trails"]:
        t = trails[e["trail_id"]]
        i = e["leaf_index"]
        require(
            0 <= i < cp_size and t.leaf_payload == raw[i],
            check,
            f"trail {e['trail_id']}: the log's leaf {i} is not the bundle's leaf",
        )
    any_tagged_key = any("matter_tag" in lf for lf in leaves)
    any_tag = any(lf.get("matter_tag") is not None for lf in leaves)
    if fmt == 1:
        # Matter format 1 discloses no key: accepted only where no leaf carries a tag.
        require(
            not any_tagged_key,
            check,
            "matter format 1, but the log holds tagged leaves "
            "(a bundle made after the tags began discloses its key)",
        )
        return
    if not require(any_tag, check, "no leaf of the log up to the checkpoint carries a tag"):
        return
    key = bytes.fromhex(mj["matter_key"])
    first_tagged = next(i for i, lf in enumerate(leaves) if "matter_tag" in lf)
    print(f"completeness: holds from the log's first tagged leaf, {first_tagged}, on")
    mine = [
        (i, lf)
        for i, lf in enumerate(leaves)
        if lf.get("matter_tag") is not None and lf["matter_tag"] == matter_tag(key, lf["trail"])
    ]
    listed = {e["trail_id"] for e in mj["trails"]}
    left = {e["trail_id"]: e for e in mj["left_out"]}
    for i, lf in mine:
        require(
            lf["trail"] in listed or lf["trail"] in left,
            check,
            f"leaf {i} (trail {lf['trail']}) is of the matter but neither in the bundle nor left out",
        )
        if fmt == 2:
            require(
                lf.get("submitted_at") is None,
                check,
                f"matter format 2, but leaf {i} of the matter carries submitted_at (downgrade)",
            )
    # The selection for left-out checks.
    since, until = mj["since"], mj["until"]
    batch = mj.get("batch") if fmt == 3 else None
    reasons = {}
    for e in mj["left_out"]:
        code = e["reason"] if fmt == 3 else legacy_reason(e["reason"])
        if code is None or code not in REASONS:
            fail(check, f"left_out {e['trail_id']}: unknown reason {e['reason']!r}")
            continue
        reasons[e["trail_id"]] = code
    if fmt == 2:
        for e in mj["left_out"]:
            mt = re.search(r"not a line of batch (\S+)\s*\Z", e["reason"])
            if mt and reasons.get(e["trail_id"]) == "outside_selection":
                batch = mt.group(1)
                break
    listed_subs = [
        trails[tid].leaf["submitted_at"]
        for tid in listed
        if trails[tid].leaf is not None and trails[tid].leaf.get("submitted_at") is not None
    ]
    earliest = min(listed_subs) if listed_subs else None
    sealing: dict[str, list] = {}
    for i, lf in enumerate(leaves):
        sealing.setdefault(lf["trail"], []).append(lf)
    for e in mj["left_out"]:
        tid = e["trail_id"]
        code = reasons.get(tid)
        if code is None:
            continue
        c = f"{check}: left_out {tid} ({code})"
        seals = sealing.get(tid, [])
        for lf in seals:  # in every case the sealing leaf must seal the listed job
            require(lf["job"] == e["job_id"], c, "the leaf that seals it seals another job")
        if code in ("open", "sealed_after_checkpoint"):
            require(not seals, c, "a leaf under the checkpoint seals it")
            continue
        if not require(len(seals) == 1, c, "no (single) leaf under the checkpoint seals it"):
            continue
        lf = seals[0]
        if code == "no_request":
            require(
                "matter_tag" in lf and lf["matter_tag"] is None,
                c,
                'its leaf does not carry "matter_tag": null',
            )
            continue
        # outside_selection: a leaf of the matter whose submitted_at or batch_tag is outside.
        if not require(
            lf.get("matter_tag") is not None and lf["matter_tag"] == matter_tag(key, tid),
            c,
            "its leaf is not of the matter (its tag is not the key's)",
        ):
            continue
        if lf.get("submitted_at") is not None:
            outside = not in_days(lf["submitted_at"][:10], since, until)
            if batch is not None:
                outside |= lf["batch_tag"] != batch_tag(key, tid, batch)
            require(outside, c, f"its leaf (submitted {lf['submitted_at']}) is of the selection")
        else:
            # A tagged leaf without them: only when sealed before since, or, for a batch
            # selection, before the earliest submitted_at of the bundle's trails.
            sealed = lf.get("sealed_at")
            ok = sealed is not None and since is not None and sealed[:10] < since
            if batch is not None and not ok:
                ok = sealed is not None and earliest is not None and sealed < earliest
            require(ok, c, f"its leaf (sealed {sealed}) cannot show it is outside the selection")


# ---------------------------------------------------------------------------------------------
# The bundle
# ---------------------------------------------------------------------------------------------


def verify(path: str, keys: list[VerifierKey], log: str | None) -> None:
    try:
        size = os.path.getsize(path)
        if size > MAX_BUNDLE:
            fail("zip container", "bundle over 256 MiB refused")
            return
        with open(path, "rb") as f:
            blob = f.read()
    except OSError as e:
        fail("zip container", f"cannot read {path} ({e})")
        return
    try:
        members = read_zip(blob)
    except Stop:
        return
    names = [n for n, _ in members]
    m = dict(members)

    # Members: exactly the format's, in order (format 6's, or format 4/5's: every trail alike).
    mj = None
    if names and names[0] == "matter.json":
        try:
            mj = load_matter(m["matter.json"])
        except Stop:
            return
        candidates = []
        for per_trail in (PER_TRAIL_6, PER_TRAIL):
            exp = ["matter.json", "checkpoint.txt", "checkpoint.tsr", "verifier-key.txt"]
            for e in mj["trails"]:
                exp += [f"trails/{e['trail_id']}/{n}" for n in per_trail]
            exp += ["report.pdf", "verification.txt", "README.txt", "manifest.json"]
            candidates.append(exp)
    else:
        candidates = [ONE_TRAIL_MEMBERS_6, ONE_TRAIL_MEMBERS]
    fmt6 = names == candidates[0]
    if fmt6 or names == candidates[1]:
        expected = names
    else:
        # Report against format 6's list unless the bundle holds none of its new members.
        has6 = any(n.rsplit("/", 1)[-1] in FORMAT6_MEMBERS for n in names)
        expected = candidates[0] if has6 else candidates[1]
    if names != expected:
        missing, extra = sorted(set(expected) - set(names)), sorted(set(names) - set(expected))
        fail(
            "members",
            f"not exactly the format's members in order (missing {missing}, extra {extra}"
            f"{', or out of order' if not missing and not extra else ''})",
        )
        return

    # Manifest: canonical, every SHA-256, bundle format 6 with format 6's members, else 5 or 4.
    try:
        man = load_canonical(m["manifest.json"], "manifest", "manifest.json")
        if (
            not isinstance(man, dict)
            or set(man) != {"files", "format_version"}
            or not isinstance(man["files"], dict)
        ):
            fail("manifest", "manifest.json is not {files, format_version}")
        else:
            fv = man["format_version"]
            if fv not in (4, 5, 6) or not is_int(fv):
                fail(
                    "descriptive files",
                    f"bundle format {fv!r} refused "
                    "(2 and 3 prove no descriptive files; this verifier reads 4, 5 and 6)",
                )
            elif fmt6 and fv != 6:
                fail(
                    "manifest", f"format 6's members (receipt.cose, destruction.json), format {fv}"
                )
            elif not fmt6 and fv == 6:
                fail("manifest", "bundle format 6 without receipt.cose and destruction.json")
            if set(man["files"]) != set(names) - {"manifest.json"}:
                fail("manifest", "the manifest does not list exactly every other member")
            for n in names[:-1]:
                if man["files"].get(n) != sha256_hex(m[n]):
                    fail("manifest", f"SHA-256 of {n} does not match")
    except Stop:
        pass

    # Checkpoint, verifier-key.txt, pinned key.
    try:
        body, origin, cp_size, cp_root, sigs = parse_checkpoint(m["checkpoint.txt"])
    except Stop:
        return
    bundled = None
    vk = m["verifier-key.txt"]
    try:
        vks = vk.decode("ascii")
        if not vks.endswith("\n") or "\n" in vks[:-1]:
            raise ValueError("must be one line ending in \\n")
        bundled = VerifierKey(vks[:-1])
    except (UnicodeDecodeError, ValueError) as e:
        fail("pinned key", f"verifier-key.txt is not a verifier key ({e})")
    if bundled is not None:
        require(
            any(bundled.same(k) for k in keys),
            "pinned key",
            "verifier-key.txt is not a key pinned with --key",
        )
        check_signature(body, sigs, bundled)
    if m["checkpoint.tsr"]:
        skip("timestamp", "checkpoint.tsr is not checked by this verifier")

    # Trails.
    if mj is None:
        verify_trail(m, "", cp_size, cp_root, fmt6, origin, bundled)
    else:
        trails = {}
        for e in mj["trails"]:
            trails[e["trail_id"]] = verify_trail(
                m, f"trails/{e['trail_id']}/", cp_size, cp_root, fmt6, origin, bundled
            )
        try:
            verify_matter_listings(mj, trails, cp_size)
        except Exception as e:
            fail("matter.json", f"malformed ({e!r})")
        if log:
            try:
                check_completeness(mj, trails, log, cp_size, cp_root)
            except Exception as e:
                fail("completeness", f"malformed ({e!r})")
        else:
            skip("completeness", "not run (no --log)")
    skip(
        "descriptive files",
        "README.txt, verification.txt and report.pdf are not re-made "
        "(only their manifest hashes are checked)",
    )


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("bundle")
    ap.add_argument(
        "--key", action="append", required=True, help="a pinned log verifier key (repeatable)"
    )
    ap.add_argument("--log", help="the log's tiles: a directory or an http(s) URL prefix")
    args = ap.parse_args(argv)
    keys = []
    for k in args.key:
        try:
            keys.append(VerifierKey(k))
        except ValueError as e:
            print(f"bad --key {k!r}: {e}", file=sys.stderr)
            return 2
    try:
        verify(args.bundle, keys, args.log)
    except Exception as e:  # a verifier never passes what it could not read
        fail("internal", f"unexpected error {e!r}")
    if FAILURES:
        return 1
    print("VERIFIED")
    return 0


if __name__ == "__main__":
    sys.exit(main())

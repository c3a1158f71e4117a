"""Verify a Pathfinder evidence bundle offline.

    python -m audit.offline_verify BUNDLE.zip --key LOG_VERIFIER_KEY [--key OLDER_KEY ...]
        [--witness-key WITNESS_KEY ...] [--witness-quorum N] [--tsa-cert TSA_ROOTS.pem]
    python -m audit.offline_verify BUNDLE.zip --allow-unpinned

Imports only the standard library, `cryptography`, ReportLab (to make report.pdf again) and the
pure modules of audit it names (never Django), so an examiner can run it on a machine of their
own with nothing but those files.

What a passing bundle proves: the records in records.jsonl form an unbroken hash chain from the
genesis hash of their trail; the chain opens with the request and ends with the answer (format
v2), and prompt.txt and answer.txt are the texts those records bind (or are declared withheld);
the ledger leaf seals exactly that trail, record count and head; the leaf is in the global log
whose root the checkpoint states; and the checkpoint is signed by a log key you pinned with --key
(obtained out of band: the operator's published key, an earlier export), cosigned by the
quorum of the witnesses you pinned, and timestamped by the authority you pinned. It exits 0
only then.
Without a pinned key the signature only shows the bundle is internally consistent, since whoever
made the bundle also chose the key: it exits 3 unless --allow-unpinned says you know.
models.json and params.json must be what the first record names, byte for byte; README.txt,
verification.txt and report.pdf (bundle format 4) what audit.evidence.descriptive makes from the
other
members. A bundle of format 2 or 3 did not prove those three: it fails unless
--unproven-descriptive says to check the rest and disregard them.

A matter bundle (matter.json) holds many trails under one checkpoint: each is checked as a
bundle of its own, and against its listing (its request record must name the matter).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib.util
import io
import json
import re
import struct
import sys
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from audit.evidence import (
    VERIFIER_VERSION,
    binding,
    chain,
    checkpoints,
    der,
    descriptive,
    matter_leaves,
    merkle,
    receipts,
    sealing,
)
from audit.evidence.bundle_format import (
    ANSWER,
    BUNDLE_FORMAT_VERSION,
    CHAIN,
    CHECKPOINT,
    DESTROYED_KEYS,
    DESTRUCTION,
    DISCLOSURES,
    INCLUSION_PROOF,
    LEDGER_LEAF,
    MANIFEST,
    MATTER,
    MATTER_FORMAT_VERSIONS,
    MAX_BUNDLE_BYTES,
    MAX_MEMBER_BYTES,
    MEMBER_NAMES,
    MEMBER_NAMES_V2,
    MEMBER_NAMES_V5,
    MODELS,
    PARAMS,
    PROMPT,
    PROVEN_DESCRIPTIVE_SINCE,
    README,
    RECEIPT,
    RECEIPTS_SINCE,
    RECORDS,
    REPORT,
    TEXT_MEMBERS,
    TIMESTAMP,
    TRAIL_MEMBERS,
    VERIFICATION,
    VERIFIER_KEY,
    described,
    deterministic_zip,
    json_member,
    matter_member_names,
    trail_member,
)
from audit.evidence.decision_rule import DECISION_SCOPE

_HEX64 = re.compile(r"[0-9a-f]{64}", re.ASCII)
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", re.ASCII)
# Exit statuses: every check passed under a pinned key; a check failed; (argparse: usage);
# every check passed but no key was pinned, so nothing ties the bundle to the log's operator.
EXIT_VERIFIED, EXIT_FAILED, EXIT_UNPINNED = 0, 1, 3


# ---------------------------------------------------------------------------------------------
# Verification


@dataclass
class Check:
    name: str
    failures: list[str] = field(default_factory=list)
    detail: str = ""
    skipped: bool = False  # not run, because what it needs failed an earlier check

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
    contents: binding.Contents | None = None
    first_record: object = None  # the first record's payload, decoded (None: none readable)
    bundle_format: int | None = None  # the manifest's format_version, once it was accepted
    question: str | None = None  # what the verified bundle says was asked, for the report
    answer: str | None = None
    listed_leaves: dict[str, dict] = field(default_factory=dict)  # a matter's, by trail id

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
    """The members, each refused before it is read when it is compressed (a deflate bomb costs
    nothing then) or larger than MAX_MEMBER_BYTES."""
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
        infos = archive.infolist()
    except Exception as exc:  # hostile input: any parser error is a finding, not a crash
        check.fail(f"not a readable zip file ({type(exc).__name__}: {exc})")
        return None
    # Members that do not overlap fit in the file: a central directory that names one member's
    # bytes many times over (a few MB claiming GBs) is refused before anything is read. (A
    # deflate bomb's few compressed bytes fit; it is refused below, as compressed.)
    declared = sum(info.compress_size for info in infos)
    if declared > len(data):
        check.fail(
            f"its {len(infos)} members declare {declared} bytes, more than the zip's "
            f"{len(data)}: they overlap; not read"
        )
        return None
    members = []
    for info in infos:
        if info.compress_type != zipfile.ZIP_STORED:
            check.fail(f"member {info.filename!r} is compressed; bundle members are stored")
            continue
        if max(info.file_size, info.compress_size) > MAX_MEMBER_BYTES:
            check.fail(f"member {info.filename!r} is over {MAX_MEMBER_BYTES} bytes; not read")
            continue
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
    if names == list(MEMBER_NAMES_V2):
        check.detail = "exactly the expected members of bundle format 2 (no report), in order"
        return
    if names == list(MEMBER_NAMES_V5):
        check.detail = "exactly the expected members of bundle formats 3 to 5, in order"
        return
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
    # Format 6 carries receipts; 3 to 5 report.pdf (a one-trail bundle's and every matter
    # bundle's) without them; 2 neither.
    if any(name == RECEIPT or name.endswith("/" + RECEIPT) for name in names):
        expected: tuple[int, ...] = (BUNDLE_FORMAT_VERSION,)
    else:
        expected = (3, 4, 5) if REPORT in names else (2,)
    if manifest["format_version"] not in expected:
        check.fail(
            f"bundle format_version {manifest['format_version']!r}; these members are format "
            f"{' or '.join(map(str, expected))}'s"
        )
    else:
        b.bundle_format = manifest["format_version"]
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
    if meta["format_version"] not in binding.FORMAT_VERSIONS:
        check.fail(f"unsupported chain format_version {meta['format_version']!r}")
        return
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
    b.contents = binding.Contents(
        trail_id,
        meta["format_version"],
        prompt_ids=_disclosed_token_ids(b.members),
        openings=_disclosed_openings(b.members),
    )
    for record in stored:
        with contextlib.suppress(ValueError, RecursionError):  # the chain check named it
            payload = _loads(record.payload)
            if record.seq == 0:
                b.first_record = payload
            b.contents.observe(record.seq, payload)
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
            f"{trail_id}; head {summary.head_hash}{_line_named(b.contents.request)}"
        )


def _line_named(request: dict | None) -> str:
    """How a Batch API line's trail is named by its request record (the caller's custom_id),
    for the records check's detail; empty for a trail of no line, or a malformed statement
    (which the records check failed)."""
    stated = (request or {}).get("batch_line")
    if stated is None or binding.batch_line_problem(stated) is not None:
        return ""
    return f"; its request record names it {binding.batch_line_said(stated)}"


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
    if not isinstance(sealed, dict) or set(sealed) not in _LEAF_SHAPES:
        check.fail(
            "ledger payload must hold exactly v, trail, job, records, head, outcome (and, "
            "sealed since the matter tags, matter_tag and sealed_at; since matter format 3, "
            "submitted_at and batch_tag too)"
        )
        return
    if sealed["outcome"] not in binding.OUTCOMES:
        check.fail(f"ledger leaf's outcome {sealed['outcome']!r} is none of {binding.OUTCOMES}")
    if "sealed_at" in sealed and not matter_leaves.UTC_TIME.fullmatch(str(sealed["sealed_at"])):
        check.fail("ledger leaf's sealed_at is not a UTC time (…T…:…:….ffffffZ)")
    if "submitted_at" in sealed:
        tagged = sealed["matter_tag"] is not None
        submitted, batch = sealed["submitted_at"], sealed["batch_tag"]
        if (submitted is not None, batch is not None) != (tagged, tagged):
            check.fail("a leaf carries submitted_at and batch_tag exactly when it carries a tag")
        elif tagged and not (
            matter_leaves.UTC_TIME.fullmatch(str(submitted)) and _HEX64.fullmatch(str(batch))
        ):
            check.fail("ledger leaf's submitted_at is not a UTC time or its batch_tag not hex")
    if b.contents is None or sealed["v"] != b.contents.format_version:
        check.fail(f"ledger payload version {sealed['v']!r} is not the chain's format_version")
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
    if b.contents is not None:
        for failure in b.contents.finish(sealed_outcome=sealed["outcome"]):
            if failure.scope != DECISION_SCOPE:  # those are the decision rule check's
                check.fail(f"seq {failure.seq}: {failure.reason}")
        request = b.contents.request
        if request is not None and sealed["job"] != request.get("job"):
            check.fail("ledger leaf seals another job than the request record names")
        submitted = request.get("submitted_at") if request is not None else None
        if "submitted_at" in sealed and request is not None and sealed["submitted_at"] != submitted:
            check.fail("ledger leaf's submitted_at is not the request record's")
        if "matter_tag" in sealed:  # sealed since the matter tags
            tag = sealed["matter_tag"]
            if (request is None) != (tag is None):
                check.fail("a leaf carries a matter tag exactly when its trail recorded a request")
            elif tag is not None and not _HEX64.fullmatch(str(tag)):
                check.fail("ledger leaf's matter_tag is not a SHA-256 hex digest")
    if not check.failures:
        check.detail = (
            f"ledger entry {b.leaf_index} seals this trail, {b.record_count} records and its head "
            f"(job {sealed['job']}, outcome {sealed['outcome']})"
        )


def _disclosed_token_ids(members: dict[str, bytes]) -> list[int] | None:
    """The prompt's token ids as disclosures.json discloses them, or None (withheld, absent,
    unreadable). Their digest is checked by 'question and answer'; a false list fails there."""
    try:
        entry = _loads(members[DISCLOSURES].decode("utf-8")).get(binding.TOKEN_IDS, {})
    except (KeyError, ValueError, AttributeError, RecursionError, UnicodeDecodeError):
        return None
    value = entry.get("value") if isinstance(entry, dict) else None
    if isinstance(value, list) and all(_int(t) for t in value):
        return value
    return None


def _disclosed_openings(members: dict[str, bytes]) -> dict[str, dict]:
    """The slots disclosures.json opens (formats 3 and 4), by slot name: each {salt, value} as
    given; the decisions check holds each to its commitment, 'question and answer' its form."""
    try:
        doc = _loads(members[DISCLOSURES].decode("utf-8"))
    except (KeyError, ValueError, RecursionError, UnicodeDecodeError):
        return {}
    if not isinstance(doc, dict):
        return {}
    return {
        name: entry
        for name, entry in doc.items()
        if sealing.is_slot_name(name) and isinstance(entry, dict)
    }


def _check_decisions(b: _Bundle, check: Check) -> None:
    """Every decision obeys the rule its own numbers force (audit.evidence.decision_rule)."""
    if b.contents is None:
        check.fail("no readable records to re-check (see the records check)")
        return
    for failure in b.contents.failures:
        if failure.scope == DECISION_SCOPE:
            check.fail(f"seq {failure.seq}: {failure.reason}")
    if b.contents.format_version < 2:
        check.detail = "format 1 records carry no decision rule fields: nothing to re-check"
    elif not check.failures:
        check.detail = _rechecked(b.contents.decisions, b.contents.sealed_decisions) + "".join(
            f"; not re-checked: {why}" for why in sorted(b.contents.unchecked)
        )


def _rechecked(decisions: int, sealed: int) -> str:
    """How many decisions the check re-checked: none whose workings are sealed (format 4)."""
    if decisions and sealed == decisions:
        return f"none of the {decisions} decisions re-checked (each one's workings are sealed)"
    counted = f"{decisions - sealed} of {decisions}" if sealed else f"{decisions}"
    return (
        f"{counted} decisions re-checked: draws, ratios, accept tests, corrections, emitted "
        "tokens, stops, the token budget and copied drafts follow from the records"
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


def _disclosed_text(b: _Bundle, name: str, entry: dict, check: Check) -> str | None:
    """The text of one disclosed field: its member's UTF-8, or canonical JSON of its value."""
    member = TEXT_MEMBERS.get(name)
    if member is not None:
        return b.text(member, check)
    if "value" not in entry:
        check.fail(f"disclosure of {name} has no value")
        return None
    try:
        return chain.canonical_json(entry["value"])
    except chain.NonCanonicalValue as exc:
        check.fail(f"disclosure of {name} has no canonical form ({exc})")
        return None


def _check_disclosures(b: _Bundle, check: Check) -> None:
    """prompt.txt, answer.txt and the other bound texts against the digests in the records. A
    text the records do not bind (a trail with no request or no answer record) must be absent:
    nothing may be shown as the question or the answer that no record vouches for."""
    doc = b.json(DISCLOSURES, check)
    contents = b.contents
    if doc is None or contents is None:
        return
    request, answer = contents.request, contents.answer
    digests = dict(request["prompt"]["digests"]) if request is not None else {}
    if answer is not None:
        digests.update(binding.answer_digests(answer))
    for name, member in TEXT_MEMBERS.items():
        if name not in digests and b.members.get(member):
            check.fail(f"{member} holds text that no record of this trail binds")
    slots = {name for name in doc if sealing.is_slot_name(name)}
    if set(doc) - slots != set(digests):
        named = sorted(set(doc) - slots)
        check.fail(f"disclosures.json names {named}; the records bind {sorted(digests)}")
        return
    _check_slot_openings(b, doc, slots, check)
    shown, withheld = [], set()
    for name in sorted(digests):
        entry = doc[name]
        form = {"salt"} if name in TEXT_MEMBERS else {"salt", "value"}
        if entry == {"withheld": True} and entry["withheld"] is True:
            member = TEXT_MEMBERS.get(name)
            if member is not None and b.members.get(member):
                check.fail(f"{name} is declared withheld, but {member} is not empty")
            shown.append(f"{name} withheld")
            withheld.add(name)
        elif not isinstance(entry, dict) or set(entry) != form or not _hex_hash(entry["salt"]):
            check.fail(f"disclosure of {name} must be {sorted(form)} or {{withheld: true}}")
        else:
            text = _disclosed_text(b, name, entry, check)
            if text is not None and not binding.text_matches(digests[name], entry["salt"], text):
                check.fail(f"{name} is not the text whose digest the records hold")
            else:
                shown.append(f"{name} matches its digest")
    if check.failures:
        return
    if binding.RENDERED in digests and binding.RENDERED not in withheld:
        b.question = b.text(PROMPT, check)
    if binding.ANSWER_TEXT in digests and binding.ANSWER_TEXT not in withheld:
        b.answer = b.text(ANSWER, check)
    if contents.format_version < 2:
        check.detail = "v1 trail: it binds no question or answer (decisions only)"
    else:
        check.detail = "; ".join(shown) or "the trail binds no text (no request was recorded)"


def _check_slot_openings(b: _Bundle, doc: dict, slots: set[str], check: Check) -> None:
    """Formats 3 and 4: every opened slot is a slot of this trail's decisions, opened as {salt,
    value} (the decisions check holds it to its commitment), and a disclosed answer's token ids
    are the emitted tokens, every one of them opened (in format 4, where every decision's
    workings are)."""
    contents = b.contents
    for name in sorted(slots):
        entry = doc[name]
        if name not in contents.committed_slots:
            check.fail(f"disclosures.json opens {name}, which no decision commits to")
        elif not isinstance(entry, dict) or set(entry) != {"salt", "value"}:
            check.fail(f"opening of {name} must be {{salt, value}}")
        elif not _hex_hash(entry["salt"]):
            check.fail(f"opening of {name} has a salt that is not 64 hex digits")
    ids = doc.get(binding.ANSWER_TOKEN_IDS)
    # With a decision's workings sealed (format 4), its tokens are the answer's digests' alone.
    linked = not contents.sealed_decisions
    if linked and isinstance(ids, dict) and "value" in ids and contents.emitted != ids["value"]:
        check.fail(
            "answer.token_ids is disclosed, but the decisions' emitted tokens, opened, are "
            "not it (each emitted token must be opened with the answer)"
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


def _check_witnesses(b: _Bundle, check: Check, keys: Sequence[str], quorum: int) -> None:
    """The pinned witnesses' cosignatures on checkpoint.txt (C2SP tlog-cosignature v1)."""
    note = b.text(CHECKPOINT, check)
    if note is None:
        return
    try:
        found = checkpoints.cosignatures(note, keys)
    except checkpoints.CheckpointError as exc:
        check.fail(str(exc))
        return
    if len(found) < quorum:
        check.fail(f"{len(found)} of the pinned witnesses cosigned; the quorum is {quorum}")
        return
    names = ", ".join(f"{key.split('+', 1)[0]} at {ts}" for key, ts in found.items())
    check.detail = f"{len(found)} pinned witness(es) cosigned, quorum {quorum}: {names}"


def _check_timestamp(b: _Bundle, check: Check, tsa_pem: bytes) -> None:
    """checkpoint.tsr is an RFC 3161 timestamp of checkpoint.txt by the pinned authority."""
    from audit.evidence import timestamps  # needs rfc3161-client, so only when a TSA is pinned

    token, note = b.members.get(TIMESTAMP), b.members.get(CHECKPOINT)
    if not token:
        check.fail("the bundle carries no timestamp (checkpoint.tsr is empty)")
        return
    try:
        check.detail = (
            f"checkpoint.txt was timestamped at {timestamps.verify(token, note, tsa_pem)}"
        )
    except timestamps.TimestampError as exc:
        check.fail(str(exc))


def _check_timestamp_shape(b: _Bundle, check: Check) -> None:
    """With no authority pinned, checkpoint.tsr must still be a timestamp response of
    checkpoint.txt (its imprint), not noise or another document's; it is then unverified."""
    try:
        imprint = der.timestamp_imprint(b.members[TIMESTAMP])
    except der.NotDer as exc:
        check.fail(f"checkpoint.tsr is not an RFC 3161 timestamp response: {exc}")
        return
    if imprint != hashlib.sha256(b.members.get(CHECKPOINT, b"")).digest():
        check.fail(
            "checkpoint.tsr timestamps another document: its imprint is not checkpoint.txt's"
        )
        return
    check.skipped = True
    check.detail = (
        "UNVERIFIED: checkpoint.tsr is a granted RFC 3161 response over checkpoint.txt (its "
        "imprint matches), but who signed it, and the time it states, are checked only with the "
        "authority's certificate (--tsa-cert)"
    )


def _check_described(b: _Bundle, check: Check) -> None:
    """models.json and params.json are exactly what the first record names, nothing else."""
    models, params = described(b.first_record)
    for name, value in ((MODELS, models), (PARAMS, params)):
        if name not in b.members:
            check.fail(f"{name} is missing")
        elif b.members[name] != json_member(value):
            check.fail(f"{name} is not what the records name (in the bundle's JSON form)")
    if not check.failures:
        check.detail = "models.json and params.json are what the first record names, byte for byte"


def _check_descriptive(b: _Bundle, check: Check, evidence_ok: bool, unproven: bool) -> None:
    """README.txt, verification.txt and report.pdf are what audit.evidence.descriptive makes from
    the
    other members, byte for byte (bundle format 4); formats 2 and 3 did not prove them."""
    if b.bundle_format is None:
        check.fail("the bundle format is unknown (see the manifest check)")
        return
    if b.bundle_format < PROVEN_DESCRIPTIVE_SINCE:
        why = (
            f"bundle format {b.bundle_format} does not let a verifier prove {README}, "
            f"{VERIFICATION} or {REPORT}"
        )
        if unproven:
            check.detail = f"{why}: disregarded (--unproven-descriptive); they are not evidence"
        else:
            check.fail(
                f"{why}: ask for a new export (format {BUNDLE_FORMAT_VERSION}), or pass "
                "--unproven-descriptive to check the rest and disregard those three"
            )
        return
    if not evidence_ok:  # the bundle has failed already; made from such evidence they prove nothing
        check.skipped = True
        check.detail = "not made again: the evidence failed the checks above"
        return
    pdf = importlib.util.find_spec("reportlab") is not None
    try:
        made = (
            descriptive.matter_descriptive(b.members, b.bundle_format, pdf=pdf)
            if MATTER in b.members
            else descriptive.trail_descriptive(b.members, b.bundle_format, pdf=pdf)
        )
    except descriptive.Unreadable as exc:
        check.fail(f"cannot make {README}, {VERIFICATION} and {REPORT} again: {exc}")
        return
    for name in made:
        if b.members.get(name) != made[name]:
            check.fail(
                f"{name} is not what the bundle's evidence makes (audit.evidence.descriptive)"
            )
    if REPORT in made and b.members.get(REPORT) != made[REPORT]:
        mismatch = descriptive.reportlab_mismatch()
        if mismatch:
            check.fail(mismatch)
    if not check.failures:
        check.detail = f"{', '.join(sorted(made))} are what the evidence makes, byte for byte"
    if not pdf:  # a named gap, not a failure: the two texts were still made again
        report = b.check(REPORT)
        report.skipped = True
        report.detail = (
            f"not made again: ReportLab is not installed (pip install "
            f"reportlab=={descriptive.REPORTLAB_VERSION}); the report is a layout of the "
            "evidence checked above, not evidence"
        )


def _bundle_bytes(source: str | Path | bytes, check: Check) -> bytes | None:
    """The bundle's bytes, refused unread when over MAX_BUNDLE_BYTES."""
    if isinstance(source, (bytes, bytearray)):
        data = bytes(source)
    else:
        try:
            size = Path(source).stat().st_size
            if size > MAX_BUNDLE_BYTES:
                check.fail(f"the bundle is {size} bytes, over the {MAX_BUNDLE_BYTES} limit")
                return None
            data = Path(source).read_bytes()
        except OSError as exc:
            check.fail(f"cannot read the bundle ({exc})")
            return None
    if len(data) > MAX_BUNDLE_BYTES:
        check.fail(f"the bundle is {len(data)} bytes, over the {MAX_BUNDLE_BYTES} limit")
        return None
    return data


@dataclass
class Findings:
    checks: list[Check]
    question: str | None = None  # prompt.txt, once it matched its digest
    answer: str | None = None  # answer.txt, once it matched its digest
    matter: dict | None = None  # a matter bundle's matter.json, once it was readable

    @property
    def failures(self) -> int:
        return sum(len(c.failures) for c in self.checks)


def inspect_bundle(
    source: str | Path | bytes,
    *,
    keys: Sequence[str] = (),
    witness_keys: Sequence[str] = (),
    witness_quorum: int | None = None,
    tsa_pem: bytes | None = None,
    unproven_descriptive: bool = False,
    log: str | None = None,
) -> Findings:
    """Every check of a bundle (a path, or the zip's bytes), in order, failures collected, and
    the question and answer it verified. `keys` are the pinned log verifier keys (several when
    the log's key was rotated); `witness_keys` the pinned witnesses, of which `witness_quorum`
    (default: all) must have cosigned; `tsa_pem` the time-stamping authority's certificates;
    `unproven_descriptive` accepts a bundle of format 2 or 3, whose README.txt, verification.txt
    and report.pdf nothing proves, and disregards those three; `log` is where the log's tiles
    are read (a URL prefix or a directory), against which a matter bundle's completeness is
    checked."""
    container = Check("zip container")
    data = _bundle_bytes(source, container)
    if data is None:
        return Findings([container])
    members = _read_zip(data, container)
    if members is None:
        return Findings([container])
    _check_container(data, members, container)
    b = _Bundle(members=dict(members), key=None)
    b.checks.append(container)
    names = [n for n, _ in members]
    if MATTER in b.members:
        doc = _check_matter(b, names)
    else:
        doc = None
        _check_members(names, b.check("members"))
        _check_manifest(b, names, b.check("manifest"))
        _check_trail(b, "")
    evidence_ok = all(c.ok for c in b.checks)  # before the pins, which judge trust, not content
    signed = _check_signed(b, keys, witness_keys, witness_quorum, tsa_pem)
    if doc is not None:
        _check_completeness(b, b.check("completeness"), doc, signed, log)
    _check_descriptive(b, b.check("descriptive files"), evidence_ok, unproven_descriptive)
    if doc is not None:
        return Findings(b.checks, matter=doc)
    return Findings(b.checks, b.question, b.answer)


def _check_trail(b: _Bundle, label: str) -> None:
    """One trail's own checks: its chain, its leaf, the leaf's proof, its texts."""
    _check_records(b, b.check(f"{label}records and chain"))
    _check_leaf(b, b.check(f"{label}ledger leaf"))
    _check_decisions(b, b.check(f"{label}decision rule"))
    leaf_check = b.check(f"{label}leaf hash")
    _check_proof(b, leaf_check, b.check(f"{label}inclusion proof"))
    _check_disclosures(b, b.check(f"{label}question and answer"))
    _check_described(b, b.check(f"{label}models and params"))
    if RECEIPT in b.members or DESTRUCTION in b.members:  # bundle format 6
        _check_receipt(b, b.check(f"{label}receipt"))
        _check_destruction(b, b.check(f"{label}destruction"))


def _check_receipt(b: _Bundle, check: Check) -> None:
    """receipt.cose: the trail's leaf, under the checkpoint's root, by the key in
    verifier-key.txt, in the one form Pathfinder writes; empty when the checkpoint was signed
    before receipts."""
    receipt = b.members.get(RECEIPT)
    if receipt is None:
        check.fail(f"{RECEIPT} is missing")
        return
    if not receipt:  # nothing to check; the inclusion proof proves the same
        check.skipped = True
        check.detail = "none: the checkpoint was signed before receipts (receipt.cose is empty)"
        return
    if b.checkpoint is None or b.leaf_index is None or b.leaf_payload is None:
        check.fail("no readable ledger leaf and checkpoint to hold the receipt to")
        return
    try:
        kid, public = receipts.key_for_verifier(_member_text(b, VERIFIER_KEY).strip())
    except checkpoints.CheckpointError as exc:
        check.fail(f"{VERIFIER_KEY} is not a verifier key ({exc})")
        return
    cp = b.checkpoint
    problems = receipts.receipt_problems(
        receipt,
        leaf=b.leaf_payload.encode("utf-8"),
        public_key=public,
        root=cp.root,
        tree_size=cp.size,
        leaf_index=b.leaf_index,
        kid=kid,
        issuer=cp.origin,
    )
    for problem in problems:
        check.fail(problem)
    if problems:
        return
    stated = receipts.decode_receipt(receipt)
    again = receipts.assemble_receipt(
        protected=receipts.receipt_protected(kid=kid, issuer=cp.origin),
        signature=stated.signature,
        tree_size=cp.size,
        leaf_index=b.leaf_index,
        proof=stated.path,
    )
    if again != receipt:
        check.fail(f"{RECEIPT} is not in the one deterministic form docs/audit-format.md gives")
    else:
        check.detail = (
            f"an RFC 9942 receipt of leaf {b.leaf_index} under the checkpoint's root, signed by "
            "the key in verifier-key.txt"
        )


def _member_text(b: _Bundle, name: str) -> str:
    return b.members.get(name, b"").decode("utf-8", "replace")


_UTC_SECOND = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z", re.ASCII)


def _check_destruction(b: _Bundle, check: Check) -> None:
    """destruction.json: {"destroyed": false}, or the destruction's time, who ran it and its
    order; a destroyed trail discloses none of its texts or openings (what the statement can be
    held to: its time and order are the service's word, its custody log's event)."""
    doc = b.json(DESTRUCTION, check)
    if doc is None:
        return
    if doc == {"destroyed": False} and doc["destroyed"] is False:
        check.detail = "its texts were not destroyed"
        return
    if (
        tuple(sorted(doc)) != DESTROYED_KEYS
        or doc["destroyed"] is not True
        or not isinstance(doc["destroyed_at"], str)
        or not _UTC_SECOND.fullmatch(doc["destroyed_at"])
        or not all(isinstance(doc[k], str) and doc[k] for k in ("destroyed_by", "order"))
    ):
        check.fail(
            f'{DESTRUCTION} must be {{"destroyed": false}} or hold exactly '
            f"{', '.join(DESTROYED_KEYS)} (destroyed true, a UTC time YYYY-MM-DDTHH:MM:SSZ, "
            "non-empty texts)"
        )
        return
    disclosures = b.members.get(DISCLOSURES, b"{}").decode("utf-8", "replace")
    try:
        opened = [n for n, e in _loads(disclosures).items() if e != {"withheld": True}]
    except (ValueError, AttributeError):
        opened = ["(disclosures.json is unreadable)"]
    shown = [m for m in TEXT_MEMBERS.values() if b.members.get(m)]
    if opened or shown:
        check.fail(f"it states the texts were destroyed, yet discloses {', '.join(opened + shown)}")
    else:
        check.detail = (
            f"destroyed on {doc['destroyed_at']} under the order {doc['order']!r}; it discloses "
            "none of its texts"
        )


def _check_signed(
    b: _Bundle, keys, witness_keys, witness_quorum, tsa_pem
) -> checkpoints.Checkpoint | None:
    """The checkpoint: its signature, the pinned key, the witnesses and the timestamp; the
    checkpoint when its signature verifies."""
    sig = b.check("checkpoint signature")
    bundled = _bundled_key(b, sig)
    cp = _check_signature(b, sig, bundled)
    if cp is not None:
        sig.detail = (
            f"origin {cp.origin!r}, tree size {cp.size}, signed by the key in verifier-key.txt "
            f"({bundled.split('+', 1)[0]}+{bundled.split('+')[1]})"
        )
    if keys:
        pinned = b.check("pinned key")
        pinned_keys = [key.strip() for key in keys]
        if bundled is not None and bundled not in pinned_keys:
            pinned.fail("verifier-key.txt is none of the keys you pinned with --key")
        elif bundled is not None and _check_signature(b, pinned, bundled) is not None:
            pinned.detail = "the checkpoint verifies with a pinned key (verifier-key.txt)"
    if witness_keys:
        quorum = len(witness_keys) if witness_quorum is None else witness_quorum
        _check_witnesses(b, b.check("witness cosignatures"), witness_keys, quorum)
    if tsa_pem is not None:
        _check_timestamp(b, b.check("timestamp"), tsa_pem)
    elif b.members.get(TIMESTAMP):
        _check_timestamp_shape(b, b.check("timestamp"))
    return cp


def _list(value: object) -> list:
    return value if isinstance(value, list) else []


def _check_completeness(
    b: _Bundle,
    check: Check,
    doc: dict,
    signed: checkpoints.Checkpoint | None,
    log: str | None,
) -> None:
    """With the log's tiles: every leaf the matter's key tags, up to the checkpoint, is a trail
    of the bundle or listed as left out, every left_out reason is what the log's leaves say, and
    the bundle is of the format its matter's leaves require."""
    if log is None:
        check.skipped = True
        check.detail = "not checked: pass --log with the log's tiles (https://<host>/log)"
        return
    if signed is None:
        check.fail("the log's leaves cannot be read against a checkpoint that does not verify")
        return
    try:
        leaves = matter_leaves.read_leaves(log, signed.size, signed.root)
    except matter_leaves.LogUnreadable as exc:
        check.fail(f"the log at {log}: {exc}")
        return
    if "matter_key" not in doc:
        tagged = next((i for i, leaf in enumerate(leaves) if _tagged(leaf)), None)
        if tagged is not None:
            check.fail(
                f"the log's leaf {tagged} carries a matter tag, so a matter bundle under this "
                "checkpoint discloses its matter's key (matter format 2 or later); this one "
                "says format 1, whose completeness nothing can check"
            )
        else:
            check.skipped = True
            check.detail = "not checked: no leaf of the log carries a matter tag (matter format 1)"
        return
    left_out = _reasons(doc)
    found = matter_leaves.scan(leaves, doc["matter_key"], asked=[e["trail_id"] for e in left_out])
    listed = [t.get("trail_id") for t in _list(doc["trails"]) if isinstance(t, dict)]
    for reason in matter_leaves.completeness_failures(
        found, listed, [e["trail_id"] for e in left_out]
    ):
        check.fail(reason)
    if doc["format_version"] < 3 and found.any_selection_leaf:
        check.fail(
            "a leaf of the matter carries submitted_at, so a bundle of it is matter format 3, "
            f"whose left_out reasons are checked; this one says format {doc['format_version']}"
        )
    lines = [
        leaf["submitted_at"]
        for leaf in b.listed_leaves.values()
        if isinstance(leaf.get("submitted_at"), str)
    ]
    for reason in matter_leaves.reason_failures(
        found, doc["matter_key"], left_out, _selection(doc), min(lines, default=None)
    ):
        check.fail(reason)
    if found.tagged_from is None:
        check.fail(f"none of the log's {found.leaves} leaves carries a matter tag")
    if not check.failures:
        check.detail = (
            f"the log's {found.leaves} leaves (read from {log}) make the checkpoint's root; from "
            f"leaf {found.tagged_from} on, where the tags begin, the matter's {len(found.matter)} "
            f"leaves are every one in the bundle or left out, and the {len(left_out)} left out "
            "are so for the reason the log's leaves give"
        )


def _tagged(leaf: str) -> bool:
    """Whether a leaf of the log is one sealed since the matter tags."""
    try:
        sealed = json.loads(leaf)
    except ValueError:
        return False
    return isinstance(sealed, dict) and "matter_tag" in sealed


_LEAF_KEYS = {"v", "trail", "job", "records", "head", "outcome"}
_TAGGED_LEAF_KEYS = _LEAF_KEYS | matter_leaves.TAGGED_LEAF_KEYS
_LEAF_SHAPES = (
    _LEAF_KEYS,
    _TAGGED_LEAF_KEYS,
    _TAGGED_LEAF_KEYS | matter_leaves.SELECTION_LEAF_KEYS,
)
_MATTER_KEYS = {"format_version", "matter", "since", "until", "tree_size", "trails", "left_out"}
_MATTER_KEYS_BY_FORMAT = {
    1: _MATTER_KEYS,
    2: _MATTER_KEYS | {"matter_key"},
    3: _MATTER_KEYS | {"matter_key", "batch"},
}
_DAY = re.compile(r"\d{4}-\d{2}-\d{2}", re.ASCII)
_LISTED_KEYS = {"trail_id", "job_id", "attempt", "outcome", "abandoned", "leaf_index"}


def _check_matter(b: _Bundle, names: list[str]) -> dict | None:
    """A matter bundle: matter.json, its members, the manifest, then every listed trail as a
    bundle of its own under the one checkpoint, each agreeing with its listing."""
    check = b.check("matter.json")
    doc = b.json(MATTER, check)
    if doc is not None and doc.get("format_version") not in MATTER_FORMAT_VERSIONS:
        check.fail(f"unsupported matter format_version {doc.get('format_version')!r}")
        doc = None
    elif doc is not None and set(doc) != _MATTER_KEYS_BY_FORMAT[doc["format_version"]]:
        keys = sorted(_MATTER_KEYS_BY_FORMAT[doc["format_version"]])
        check.fail(f"matter.json of format {doc['format_version']} must hold exactly {keys}")
        doc = None
    if doc is not None and "matter_key" in doc and not _HEX64.fullmatch(str(doc["matter_key"])):
        check.fail("matter_key must be 64 lowercase hex digits")
        doc = None
    listed = doc.get("trails") if doc is not None else None
    if doc is not None and (not isinstance(doc["matter"], str) or not _int(doc["tree_size"])):
        check.fail("matter must be a string and tree_size a non-negative integer")
    if (
        not isinstance(listed, list)
        or not listed
        or not all(isinstance(t, dict) and set(t) == _LISTED_KEYS for t in listed)
    ):
        check.fail(f"trails must be a non-empty list of objects with keys {sorted(_LISTED_KEYS)}")
        listed = []
    ids = [t["trail_id"] for t in listed]
    if not all(isinstance(t, str) and _UUID.fullmatch(t) for t in ids) or len(set(ids)) != len(ids):
        check.fail("every trail_id must be a distinct canonical lowercase UUID")
        listed, ids = [], []
    indexes = [t["leaf_index"] for t in listed]
    if not all(_int(i) for i in indexes) or indexes != sorted(set(indexes)):
        check.fail("trails must be listed in log order (leaf_index strictly increasing)")
    left_out = doc.get("left_out") if doc is not None else []
    if not isinstance(left_out, list) or not all(
        isinstance(t, dict) and set(t) == {"trail_id", "job_id", "reason"} for t in left_out
    ):
        check.fail("left_out must be a list of objects with keys job_id, reason, trail_id")
    else:
        for entry in left_out:
            if entry["trail_id"] in ids:
                check.fail(
                    f"trail {entry['trail_id']} is in the bundle and also listed as left out"
                )
            if (
                doc is not None
                and doc["format_version"] >= 3
                and (entry["reason"] not in matter_leaves.LEFT_OUT_REASONS)
            ):
                check.fail(
                    f"trail {entry['trail_id']} is left out for {entry['reason']!r}, no reason a "
                    f"verifier can check (one of {', '.join(matter_leaves.LEFT_OUT_REASONS)})"
                )
    if doc is not None and not all(
        day is None or (isinstance(day, str) and _DAY.fullmatch(day))
        for day in (doc["since"], doc["until"])
    ):
        check.fail("since and until must each be a UTC day (YYYY-MM-DD) or null")
    if doc is not None and not isinstance(doc.get("batch"), str | None):
        check.fail("batch must be a batch id or null")
    for t in listed:
        if t["abandoned"] is not (t["outcome"] == "abandoned"):
            check.fail(f"trail {t['trail_id']}: abandoned must be true exactly when outcome is")
    if not check.failures:
        check.detail = (
            f"matter {doc['matter']!r}: {len(listed)} trails under the checkpoint of "
            f"{doc['tree_size']} trails, {len(doc['left_out'])} left out"
        )
    members = b.check("members")
    if ids and names == matter_member_names(ids, RECEIPTS_SINCE - 1):
        members.detail = f"exactly the expected members of formats 3 to 5, for {len(ids)} trails"
    elif ids and names != matter_member_names(ids):
        expected = matter_member_names(ids)
        missing = [n for n in expected if n not in names]
        extra = [n for n in names if n not in expected]
        members.fail(
            f"not the members matter.json implies (missing: {missing[:5]}, unexpected: "
            f"{extra[:5]}, or out of order)"
        )
    elif ids:
        members.detail = f"exactly the expected members, in order, for {len(ids)} trails"
    _check_manifest(b, names, b.check("manifest"))
    requests = [_check_listed_trail(b, doc, entry) for entry in listed]
    if listed:
        _check_attempts(listed, requests, left_out if isinstance(left_out, list) else [], b)
    return doc


def _check_attempts(listed: list[dict], requests: list, left_out: list[dict], b: _Bundle) -> None:
    """Every attempt's earlier attempt is in the bundle or listed as left out, so dropping one
    from a matter shows: attempt n > 1 names attempt n - 1 of the same job (previous_trail)."""
    check = b.check("attempts")
    listed_by_id = {e["trail_id"]: e for e in listed}
    left_by_id = {
        e["trail_id"]: e
        for e in left_out
        if isinstance(e, dict) and isinstance(e.get("trail_id"), str)
    }
    for entry, request in zip(listed, requests, strict=True):
        if request is None:
            continue  # its listing check failed for that
        attempt, previous = request.get("attempt"), request.get("previous_trail")
        name = f"trail {entry['trail_id']} (attempt {attempt!r})"
        if previous is not None and not isinstance(previous, str):
            check.fail(f"{name}: previous_trail is not a trail id")
        elif (attempt == 1) != (previous is None):
            check.fail(f"{name}: the first attempt, and only it, names no previous trail")
        elif previous in listed_by_id:
            earlier = listed_by_id[previous]
            if (earlier["job_id"], earlier["attempt"]) != (entry["job_id"], attempt - 1):
                check.fail(f"{name}: its previous trail is not attempt {attempt - 1} of its job")
        elif previous is not None and left_by_id.get(previous, {}).get("job_id") != entry["job_id"]:
            check.fail(
                f"{name}: its previous trail {previous} is neither in the bundle nor left out"
            )
    if not check.failures:
        check.detail = (
            "every attempt after the first names its earlier one, in the bundle or left out"
        )


def _check_listed_trail(b: _Bundle, doc: dict, entry: dict) -> dict | None:
    """One listed trail checked as a bundle of its own; its request record (None: none)."""
    trail_id = entry["trail_id"]
    own = {
        name: b.members[trail_member(trail_id, name)]
        for name in TRAIL_MEMBERS
        if trail_member(trail_id, name) in b.members
    }
    signed = {name: b.members.get(name, b"") for name in (CHECKPOINT, VERIFIER_KEY)}
    sub = _Bundle(members={**own, **signed}, key=None)
    label = f"trail {trail_id}: "
    _check_trail(sub, label)
    b.checks.extend(sub.checks)
    check = b.check(f"{label}listing")
    if sub.trail_id != trail_id:
        check.fail(f"its chain is of trail {sub.trail_id}, not the one matter.json lists")
    if sub.leaf_index != entry["leaf_index"]:
        check.fail(
            f"its ledger leaf is entry {sub.leaf_index}, matter.json says {entry['leaf_index']}"
        )
    if sub.checkpoint is not None and sub.checkpoint.size != doc["tree_size"]:
        check.fail(
            f"the checkpoint is of {sub.checkpoint.size} trails; matter.json says "
            f"{doc['tree_size']}"
        )
    try:
        sealed = _loads(sub.leaf_payload or "{}")
    except ValueError:
        sealed = {}
    if not isinstance(sealed, dict) or (sealed.get("job"), sealed.get("outcome")) != (
        entry["job_id"],
        entry["outcome"],
    ):
        check.fail("its ledger leaf seals another job or outcome than matter.json lists")
    request = sub.contents.request if sub.contents is not None else None
    if request is None:
        check.fail("it has no request record, so nothing binds it to the matter")
    elif (request.get("matter"), request.get("attempt")) != (doc["matter"], entry["attempt"]):
        check.fail(
            f"its request record is of matter {request.get('matter')!r}, attempt "
            f"{request.get('attempt')!r}; matter.json lists {doc['matter']!r}, attempt "
            f"{entry['attempt']!r}"
        )
    key, tag = doc.get("matter_key"), sealed.get("matter_tag") if isinstance(sealed, dict) else None
    if key is not None and tag is not None and tag != matter_leaves.matter_tag(key, trail_id):
        check.fail("its ledger leaf's matter_tag is not the one matter_key makes for it")
    line = (request or {}).get("batch_line")
    stated = isinstance(line, dict) and key is not None and tag is not None
    if stated and sealed.get("batch_tag") not in (None, _batch_tag_of(key, trail_id, line)):
        check.fail("its ledger leaf's batch_tag is not of the batch its request record names")
    if isinstance(sealed, dict):
        b.listed_leaves[trail_id] = sealed
        _check_format_floor(check, doc, sealed)
        if key is not None and request is not None:
            selection = matter_leaves.Selection(doc["since"], doc["until"], doc.get("batch"))
            holds = selection.holds(sealed, key, submitted_at=request.get("submitted_at"))
            if holds is not True:
                check.fail(
                    f"nothing signed shows it is of the selection, {descriptive.selection_of(doc)}"
                    if holds is None
                    else f"it is not of the selection, {descriptive.selection_of(doc)}"
                )
    if not check.failures:
        check.detail = (
            f"job {entry['job_id']}, attempt {entry['attempt']}, {entry['outcome']}, of matter "
            f"{doc['matter']!r}"
        )
    return request


def _batch_tag_of(key: str, trail_id: str, line: dict) -> str:
    """The batch tag a leaf carries for the batch a request record's batch_line names."""
    return matter_leaves.batch_tag(key, trail_id, str(line.get("batch")))


def _check_format_floor(check: Check, doc: dict, sealed: dict) -> None:
    """A matter bundle cannot claim a format older than its leaves: a tagged leaf needs the
    matter's key (format 2), a leaf that carries submitted_at checked reasons (format 3)."""
    if "submitted_at" in sealed and doc["format_version"] < 3:
        check.fail(
            "its ledger leaf carries submitted_at, so a bundle of it is matter format 3, whose "
            "selection and left_out reasons are checked; this one says format "
            f"{doc['format_version']}"
        )
    elif "matter_tag" in sealed and doc["format_version"] < 2:
        check.fail(
            "its ledger leaf carries a matter tag, so a bundle of it discloses the matter's key "
            "(matter format 2 or later); this one says format 1"
        )


# Matter format 2 wrote its reasons as text; these are the checks each text asks for.
_LEGACY_REASONS = (
    ("still open", matter_leaves.OPEN),
    ("sealed after the checkpoint", matter_leaves.SEALED_AFTER),
    ("outside the selection", matter_leaves.OUTSIDE),
)
_LEGACY_BATCH = re.compile(r"not a line of batch (\S+)$")


def _reasons(doc: dict) -> list[dict]:
    """matter.json's left_out entries with each reason as the code a verifier checks."""
    if doc["format_version"] >= 3:
        return _list(doc["left_out"])
    entries = []
    for entry in _list(doc["left_out"]):
        code = next(
            (c for prefix, c in _LEGACY_REASONS if str(entry["reason"]).startswith(prefix)),
            entry["reason"],
        )
        entries.append({**entry, "reason": code})
    return entries


def _selection(doc: dict) -> matter_leaves.Selection:
    batch = doc.get("batch")
    if doc["format_version"] < 3:  # format 2 named a batch only in its reasons
        named = (_LEGACY_BATCH.search(str(e["reason"])) for e in _list(doc["left_out"]))
        batch = next((m.group(1) for m in named if m), None)
    return matter_leaves.Selection(doc["since"], doc["until"], batch)


def check_bundle(source: str | Path | bytes, **pins) -> list[Check]:
    return inspect_bundle(source, **pins).checks


def verify_bundle(source: str | Path | bytes, **pins) -> list[str]:
    """Every failure found in the bundle, as 'check: reason' lines; empty when it verifies."""
    return [f"{c.name}: {reason}" for c in check_bundle(source, **pins) for reason in c.failures]


UNPINNED_NOTE = (
    "NO LOG KEY PINNED: the checkpoint signature was checked only against the key inside the "
    "bundle, which whoever produced the bundle chose, so this proves consistency, not origin. "
    "Pin the log's verifier key, obtained out of band, with --key."
)


def _shown(label: str, text: str | None) -> str:
    if text is None:
        return f"{label}: (withheld, or not verified)"
    quoted = "\n".join(f"    | {line}" for line in text.split("\n"))
    return f"{label} ({len(text)} characters):\n{quoted}"


def _tally(findings: Findings) -> str:
    skipped = sum(1 for c in findings.checks if c.skipped)
    passed = f"{len(findings.checks) - skipped} checks passed"
    return f"{passed}, {skipped} not run (SKIP above)" if skipped else passed


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m audit.offline_verify",
        description="Verify a Pathfinder evidence bundle offline.",
    )
    parser.add_argument("bundle", help="the bundle .zip file")
    parser.add_argument(
        "--version",
        action="version",
        version=f"pathfinder-verify {VERIFIER_VERSION} (bundle formats 2 to "
        f"{BUNDLE_FORMAT_VERSION}, matter formats 1 to {max(MATTER_FORMAT_VERSIONS)})",
    )
    parser.add_argument(
        "--key",
        action="append",
        default=[],
        help="a log verifier key (<name>+<id>+<key>) obtained out of band; repeat it to pin the "
        "keys of a rotated log",
    )
    parser.add_argument(
        "--witness-key",
        action="append",
        default=[],
        help="a witness's verifier key (<name>+<id>+<key>, type 0x04); repeatable",
    )
    parser.add_argument(
        "--witness-quorum",
        type=int,
        help="how many pinned witnesses must have cosigned (default: all of them)",
    )
    parser.add_argument(
        "--tsa-cert",
        type=Path,
        help="PEM of the time-stamping authority's root (and intermediate) certificates; the "
        "bundle's RFC 3161 timestamp must verify with it (needs the rfc3161-client package)",
    )
    parser.add_argument(
        "--allow-unpinned",
        action="store_true",
        help="exit 0 without a pinned key (the result then proves consistency, not origin)",
    )
    parser.add_argument(
        "--unproven-descriptive",
        action="store_true",
        help="accept a bundle of format 2 or 3 and disregard its README.txt, verification.txt "
        "and report.pdf, which that format does not prove",
    )
    parser.add_argument(
        "--log",
        help="the log's public tiles, a URL prefix (https://<host>/log) or a directory of the "
        "same layout: a matter bundle is then checked complete against every leaf up to its "
        "checkpoint",
    )
    args = parser.parse_args(argv)
    if args.witness_quorum is not None and not 0 <= args.witness_quorum <= len(args.witness_key):
        parser.error("--witness-quorum must be between 0 and the number of --witness-key")
    findings = inspect_bundle(
        args.bundle,
        keys=args.key,
        witness_keys=args.witness_key,
        witness_quorum=args.witness_quorum,
        tsa_pem=args.tsa_cert.read_bytes() if args.tsa_cert else None,
        unproven_descriptive=args.unproven_descriptive,
        log=args.log,
    )
    print(f"Pathfinder evidence bundle {args.bundle}")
    for c in findings.checks:
        if c.skipped:
            print(f"SKIP  {c.name}: {c.detail}")
        elif c.ok:
            print(f"OK    {c.name}: {c.detail}" if c.detail else f"OK    {c.name}")
        else:
            print(f"FAIL  {c.name}:")
            for reason in c.failures:
                print(f"        - {reason}")
    if not args.witness_key:
        print("NOTE  No --witness-key: witness cosignatures were not checked.")
    if args.tsa_cert is None:
        print(
            "NOTE  No --tsa-cert: the RFC 3161 timestamp (checkpoint.tsr), if any, is UNVERIFIED: "
            "only its imprint was checked, not who signed it or the time it states."
        )
    if findings.failures:
        s = "s" if findings.failures != 1 else ""
        print(f"RESULT: FAILED ({findings.failures} failure{s})")
        return EXIT_FAILED
    if findings.matter is not None:
        trails = findings.matter["trails"]
        abandoned = sum(1 for t in trails if t["abandoned"])
        print(
            f"MATTER {findings.matter['matter']!r}: {len(trails)} trails ({abandoned} abandoned "
            f"attempts), {len(findings.matter['left_out'])} left out (see matter.json)"
        )
        # What was produced: compare it with what was asked for (the selection is the maker's).
        print(f"SELECTION {descriptive.selection_of(findings.matter)}")
    else:
        print(_shown("QUESTION (prompt.txt, the rendered prompt)", findings.question))
        print(_shown("ANSWER (answer.txt, the output text as served)", findings.answer))
    if not args.key:
        print(f"WARNING  {UNPINNED_NOTE}")
        if not args.allow_unpinned:
            print("RESULT: NOT VERIFIED (no log key pinned; --allow-unpinned accepts that)")
            return EXIT_UNPINNED
        print(f"RESULT: CONSISTENT BUT UNPINNED ({_tally(findings)})")
        return EXIT_VERIFIED
    print(f"RESULT: VERIFIED ({_tally(findings)})")
    return EXIT_VERIFIED


if __name__ == "__main__":
    sys.exit(main())

"""The hash-chain byte format, and verification of chains streamed from anywhere.

Pure Python (no Django): the same code verifies rows from the database and records from an export.
docs/audit-format.md specifies every byte; tests/unit/test_chain_golden.py holds this module to the
committed golden vectors.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

FORMAT_VERSION = (
    1  # of the hash formulas below; a trail's record format is audit.evidence.binding's
)
_RECORD_TAG = b"PF-RECORD-v1"
_GENESIS_TAG = b"PF-GENESIS-v1"
_LEDGER_TAG = b"PF-LEDGER-v1"
_LEDGER_GENESIS_TAG = b"PF-LEDGER-GENESIS-v1"
_SEP = b"\x00"


class NonCanonicalValue(TypeError):
    """A payload held a value with no single canonical spelling (a float, NaN, a set...)."""


def canonical_json(value: object) -> str:
    """RFC 8785-style canonical JSON: sorted keys, no whitespace, UTF-8 text, integers only.

    Floats are refused rather than formatted: another language might print them differently, so
    probabilities travel as decimal strings.
    """
    _reject_non_canonical(value)
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _reject_non_canonical(value: object) -> None:
    if value is None or isinstance(value, (bool, str)):
        return
    if isinstance(value, int):
        if abs(value) > 2**53 - 1:
            raise NonCanonicalValue(f"integer {value} is outside the interoperable range")
        return
    if isinstance(value, list):
        for item in value:
            _reject_non_canonical(item)
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise NonCanonicalValue(f"object key {key!r} is not a string")
            _reject_non_canonical(item)
        return
    raise NonCanonicalValue(f"{type(value).__name__} {value!r} has no canonical form")


def _sha256(*parts: bytes) -> str:
    return hashlib.sha256(_SEP.join(parts)).hexdigest()


def genesis_hash(trail_id: str) -> str:
    """prev_hash of a trail's first record; derived from the trail id so records cannot move."""
    return _sha256(_GENESIS_TAG, trail_id.encode("ascii"))


def record_hash(trail_id: str, seq: int, prev_hash: str, payload: str) -> str:
    return _sha256(
        _RECORD_TAG,
        trail_id.encode("ascii"),
        str(seq).encode("ascii"),
        prev_hash.encode("ascii"),
        payload.encode("utf-8"),
    )


def ledger_genesis_hash() -> str:
    return _sha256(_LEDGER_GENESIS_TAG)


def ledger_payload(
    *,
    format_version: int,
    trail_id: str,
    job_id: str,
    record_count: int,
    head_hash: str,
    outcome: str,
    tagged: tuple[str | None, str] | None = None,
    selection: tuple[str | None, str | None] | None = None,
) -> str:
    """A sealed trail's leaf; "v" is the trail's format version. `tagged`, in leaves sealed
    since the matter tags: the matter tag (None for a trail that recorded no request, whose
    matter no record names) and the seal time; `selection`, in leaves sealed since matter
    format 3: the job's submission time and the batch tag (None without a request)
    (audit.evidence.matter_leaves)."""
    leaf = {
        "v": format_version,
        "trail": trail_id,
        "job": job_id,
        "records": record_count,
        "head": head_hash,
        "outcome": outcome,
    }
    if tagged is not None:
        leaf["matter_tag"], leaf["sealed_at"] = tagged
    if selection is not None:
        leaf["submitted_at"], leaf["batch_tag"] = selection
    return canonical_json(leaf)


def ledger_entry_hash(seq: int, prev_hash: str, payload: str) -> str:
    return _sha256(
        _LEDGER_TAG, str(seq).encode("ascii"), prev_hash.encode("ascii"), payload.encode("utf-8")
    )


@dataclass(frozen=True)
class Failure:
    """One broken link. `seq` is the record (or ledger entry) where the break shows."""

    scope: str  # "trail", "decision" (audit.evidence.decision_rule), "ledger" or "checkpoint"
    trail_id: str | None
    seq: int | None
    reason: str

    def as_dict(self) -> dict:
        return {"scope": self.scope, "trail": self.trail_id, "seq": self.seq, "reason": self.reason}

    def __str__(self) -> str:
        where = f"trail {self.trail_id}" if self.trail_id else self.scope
        at = f" seq {self.seq}" if self.seq is not None else ""
        return f"{where}{at}: {self.reason}"


@dataclass(frozen=True)
class StoredRecord:
    trail_id: str
    seq: int
    prev_hash: str
    record_hash: str
    payload: str


@dataclass(frozen=True)
class StoredLedgerEntry:
    seq: int
    prev_hash: str
    entry_hash: str
    payload: str


@dataclass
class TrailSummary:
    """What a pass over one trail's records established: its length and head as recomputed."""

    trail_id: str
    record_count: int = 0
    head_hash: str = ""
    failures: list[Failure] = field(default_factory=list)


def verify_trail(trail_id: str, records: Iterable[StoredRecord]) -> TrailSummary:
    """Check every link of one trail, given its records in (seq, insertion) order.

    Every failure is collected. After a break the walk continues from the stored hash, so one
    tampered record is reported once rather than poisoning every later link.
    """
    summary = TrailSummary(trail_id=trail_id, head_hash=genesis_hash(trail_id))
    expected_seq = 0
    for record in records:
        fail = summary.failures.append
        if record.trail_id != trail_id:
            fail(Failure("trail", trail_id, record.seq, "record belongs to another trail"))
        if record.seq < expected_seq:
            fail(Failure("trail", trail_id, record.seq, "duplicate or out-of-order seq"))
        elif record.seq > expected_seq:
            missing = (
                f"seq {expected_seq}"
                if record.seq == expected_seq + 1
                else f"seq {expected_seq}..{record.seq - 1}"
            )
            fail(Failure("trail", trail_id, expected_seq, f"record missing ({missing})"))
        elif record.prev_hash != summary.head_hash:
            fail(Failure("trail", trail_id, record.seq, "prev_hash does not match predecessor"))
        recomputed = record_hash(trail_id, record.seq, record.prev_hash, record.payload)
        if recomputed != record.record_hash:
            fail(Failure("trail", trail_id, record.seq, "record_hash does not match contents"))
        else:
            _check_payload(trail_id, record, fail)
        summary.head_hash = record.record_hash
        summary.record_count += 1
        expected_seq = max(expected_seq, record.seq + 1)
    return summary


def _check_payload(trail_id: str, record: StoredRecord, fail) -> None:
    try:
        canonical = canonical_json(json.loads(record.payload))
    except (ValueError, NonCanonicalValue) as exc:
        fail(Failure("trail", trail_id, record.seq, f"payload is not canonical JSON ({exc})"))
        return
    if canonical != record.payload:
        fail(Failure("trail", trail_id, record.seq, "payload is not in canonical form"))


def verify_ledger(entries: Iterable[StoredLedgerEntry]) -> Iterator[tuple[dict, list[Failure]]]:
    """Walk the global ledger chain; yield each entry's decoded payload with its own failures."""
    head = ledger_genesis_hash()
    expected_seq = 0
    for entry in entries:
        failures: list[Failure] = []
        if entry.seq != expected_seq:
            failures.append(
                Failure("ledger", None, expected_seq, f"entry seq {entry.seq} out of order")
            )
        elif entry.prev_hash != head:
            failures.append(Failure("ledger", None, entry.seq, "prev_hash does not match"))
        if ledger_entry_hash(entry.seq, entry.prev_hash, entry.payload) != entry.entry_hash:
            failures.append(Failure("ledger", None, entry.seq, "entry_hash does not match"))
        try:
            decoded = json.loads(entry.payload)
        except ValueError:
            decoded = {}
            failures.append(Failure("ledger", None, entry.seq, "payload is not JSON"))
        head = entry.entry_hash
        expected_seq = max(expected_seq, entry.seq + 1)
        yield decoded, failures


def check_sealed_trail(entry: dict, summary: TrailSummary | None) -> list[Failure]:
    """Compare a ledger leaf with what the trail's records recompute to."""
    trail_id = entry.get("trail")
    if summary is None:
        return [Failure("trail", trail_id, None, "trail sealed in the ledger is missing")]
    failures = []
    sealed_count = entry.get("records")
    if summary.record_count != sealed_count:
        failures.append(
            Failure(
                "trail",
                trail_id,
                min(summary.record_count, sealed_count or 0),
                f"trail has {summary.record_count} records; ledger sealed {sealed_count}",
            )
        )
    elif summary.head_hash != entry.get("head"):
        failures.append(
            Failure("trail", trail_id, summary.record_count - 1, "head hash differs from ledger")
        )
    return failures

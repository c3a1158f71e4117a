"""The chain-of-custody log's byte format and its verification. Pure Python (no Django).

Every reviewer action (view, verify, replay, export, export_matter, annotate, sign_off) and every
records-management act (legal_hold, release_hold, retention, destroy) appends one event. Events
are chained the way audit records are (docs/audit-format.md), in one chain over the whole portal:

    payload          = canonical JSON (audit.evidence.chain.canonical_json: sorted keys, no
                       whitespace, UTF-8, integers only) of
                       {"action": "view" | "verify" | "replay" | "export" | "export_matter"
                                 | "annotate" | "sign_off" | "legal_hold" | "release_hold"
                                 | "retention" | "destroy",
                        "user":   {"id": <user id>, "username": <username at the time>},
                        "job":    <job id, canonical UUID text> | null,
                        "trail":  <trail id, canonical UUID text> | null,
                        "detail": <object: what the action saw or did, action-specific>,
                        "at":     <UTC time, ISO 8601 with microseconds, "+00:00">}
    genesis_hash     = SHA256("PF-CUSTODY-GENESIS-v1")
    event_hash       = SHA256("PF-CUSTODY-v1" ‖ NUL ‖ seq ‖ NUL ‖ prev_hash ‖ NUL ‖ payload)
    prev_hash(seq 0) = genesis_hash;  prev_hash(seq n > 0) = event_hash of seq n-1

SHA256 is the lowercase hex digest, seq is base-10 ASCII, the payload is hashed as the exact stored
UTF-8 bytes. Appends are serialised (one writer at a time), so seq has no gaps and is commit order.
A page view is written first as pending and chained moments later, so its "at" (when it
happened) may be a little earlier than that of an event chained before it.
The columns next to the payload (action, user, job, trail, detail, time) are query copies; a
verifier requires them to say what the hashed payload says.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from audit.evidence.chain import canonical_json

_EVENT_TAG = b"PF-CUSTODY-v1"
_GENESIS_TAG = b"PF-CUSTODY-GENESIS-v1"
_SEP = b"\x00"


def custody_genesis_hash() -> str:
    return hashlib.sha256(_GENESIS_TAG).hexdigest()


def custody_event_hash(seq: int, prev_hash: str, payload: str) -> str:
    message = _SEP.join(
        (_EVENT_TAG, str(seq).encode("ascii"), prev_hash.encode("ascii"), payload.encode("utf-8"))
    )
    return hashlib.sha256(message).hexdigest()


def custody_time(at: datetime) -> str:
    return at.astimezone(UTC).isoformat(timespec="microseconds")


def custody_payload(
    *,
    action: str,
    user_id: int,
    username: str,
    job_id: str | None,
    trail_id: str | None,
    detail: dict,
    at: datetime,
) -> str:
    return canonical_json(
        {
            "action": action,
            "user": {"id": user_id, "username": username},
            "job": job_id,
            "trail": trail_id,
            "detail": detail,
            "at": custody_time(at),
        }
    )


@dataclass(frozen=True)
class StoredEvent:
    """One event as stored: the hashed fields and the query copies beside them."""

    seq: int
    prev_hash: str
    event_hash: str
    payload: str
    action: str
    user_id: int
    job_id: str | None
    trail_id: str | None
    detail: str
    at: datetime


@dataclass(frozen=True)
class CustodyFailure:
    seq: int
    reason: str

    def __str__(self) -> str:
        return f"custody event seq {self.seq}: {self.reason}"


@dataclass
class CustodyReport:
    events_checked: int = 0
    failures: list[CustodyFailure] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failures

    @property
    def first_failure(self) -> CustodyFailure | None:
        return self.failures[0] if self.failures else None


def verify_events(
    events: Iterable[StoredEvent], *, after: tuple[int, str] | None = None
) -> CustodyReport:
    """Check every link of the chain (events in seq order), collecting every failure; from
    its start, or from the event after `after` = (seq, event hash) of a verified event."""
    report = CustodyReport()
    expected_seq, expected_prev = (after[0] + 1, after[1]) if after else (0, custody_genesis_hash())
    for event in events:
        report.events_checked += 1
        fail = report.failures.append
        if event.seq != expected_seq:
            fail(CustodyFailure(expected_seq, f"event missing (next stored seq is {event.seq})"))
        if event.prev_hash != expected_prev:
            fail(CustodyFailure(event.seq, "prev_hash does not match the event before it"))
        if custody_event_hash(event.seq, event.prev_hash, event.payload) != event.event_hash:
            fail(CustodyFailure(event.seq, "event_hash does not match its payload"))
        for reason in _payload_problems(event):
            fail(CustodyFailure(event.seq, reason))
        expected_seq, expected_prev = event.seq + 1, event.event_hash
    return report


def _payload_problems(event: StoredEvent) -> list[str]:
    try:
        payload = json.loads(event.payload)
        canonical = canonical_json(payload) == event.payload
    except (ValueError, TypeError):
        return ["payload is not canonical JSON"]
    if not canonical or not isinstance(payload, dict):
        return ["payload is not canonical JSON"]
    try:
        detail = json.loads(event.detail)
    except ValueError:
        detail = event.detail
    columns = {
        "action": event.action,
        "user": event.user_id,
        "job": event.job_id,
        "trail": event.trail_id,
        "detail": detail,
        "at": custody_time(event.at),
    }
    user = payload.get("user")
    hashed = {**payload, "user": user.get("id") if isinstance(user, dict) else None}
    return [
        f"the stored {name} differs from the hashed payload"
        for name, value in columns.items()
        if hashed.get(name) != value
    ]

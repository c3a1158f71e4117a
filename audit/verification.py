"""Verify what the database holds: stream rows from one consistent snapshot into audit.chain,
collect every failure, and record the run."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from itertools import groupby

from django.db import connection, transaction
from django.utils import timezone

from . import chain
from .log import checkpoint_failures
from .models import DecisionRecord, LedgerEntry, Trail, VerificationRun

_CHUNK = 2000


@dataclass
class Report:
    scope: str
    trails_checked: int = 0
    records_checked: int = 0
    ledger_entries_checked: int = 0
    failures: list[chain.Failure] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failures

    def lines(self) -> list[str]:
        """The report for people: a summary, then each broken link."""
        lines = [
            f"Verified {self.scope}: {self.trails_checked} trails, {self.records_checked} "
            f"records, {self.ledger_entries_checked} ledger entries.",
        ]
        if self.ok:
            return [*lines, "INTACT: every link verifies."]
        return [
            *lines,
            f"BROKEN: {len(self.failures)} broken link(s).",
            *(f"  {failure}" for failure in self.failures),
        ]

    def as_dict(self) -> dict:
        return {
            "scope": self.scope,
            "ok": self.ok,
            "trails_checked": self.trails_checked,
            "records_checked": self.records_checked,
            "ledger_entries_checked": self.ledger_entries_checked,
            "failures": [failure.as_dict() for failure in self.failures],
        }


def verify_trails(trail_ids: Iterable[uuid.UUID], *, scope: str) -> Report:
    """Verify the given trails: every link, the head against the ledger leaf (or the trail row
    while the trail is open), and the leaf's own link in the ledger."""
    started = timezone.now()
    report = Report(scope=scope)
    with _snapshot():
        for trail_id in trail_ids:
            records = DecisionRecord.objects.filter(trail_id=trail_id).order_by("seq", "id")
            summary = _walk_trail(str(trail_id), _stored(records), report)
            trail = Trail.objects.filter(pk=trail_id).first()
            entry = LedgerEntry.objects.filter(trail_id=trail_id).first()
            if entry is not None:
                report.failures.extend(_ledger_link_failures(entry))
                report.ledger_entries_checked += 1
            _check_head(str(trail_id), summary, trail, entry.payload if entry else None, report)
    return _recorded(report, started)


def verify_everything(*, progress: Callable[[], None] | None = None) -> Report:
    """Verify every trail and the whole ledger, one streamed pass over each table."""
    started = timezone.now()
    report = Report(scope="all")
    with _snapshot():
        summaries: dict[str, chain.TrailSummary] = {}
        rows = DecisionRecord.objects.order_by("trail_id", "seq", "id")
        for trail_id, records in groupby(_stored(rows), key=lambda record: record.trail_id):
            summaries[trail_id] = _walk_trail(trail_id, records, report)
            if progress:
                progress()
        trails = {
            str(trail.id): trail
            for trail in Trail.objects.only("id", "status", "record_count", "head_hash").iterator(
                chunk_size=_CHUNK
            )
        }
        sealed: set[str] = set()
        leaves: list[bytes] = []  # the Merkle log's leaves, for the checkpoints below
        for payload, failures in chain.verify_ledger(_ledger_entries(leaves)):
            report.ledger_entries_checked += 1
            report.failures.extend(failures)
            trail_id = payload.get("trail")
            sealed.add(trail_id)
            summary = summaries.get(trail_id)
            if summary is None and trail_id in trails:
                summary = _empty_summary(trail_id)
            report.failures.extend(chain.check_sealed_trail(payload, summary))
        for trail_id, trail in trails.items():
            if trail_id not in sealed:
                _check_head(
                    trail_id,
                    summaries.get(trail_id) or _empty_summary(trail_id),
                    trail,
                    None,
                    report,
                )
        for trail_id in summaries.keys() - trails.keys() - sealed:
            report.failures.append(
                chain.Failure("trail", trail_id, 0, "records belong to a trail that does not exist")
            )
        for reason in checkpoint_failures(leaves):
            report.failures.append(chain.Failure("checkpoint", None, None, reason))
    return _recorded(report, started)


def _ledger_entries(leaves: list[bytes]) -> Iterator[chain.StoredLedgerEntry]:
    """Stream the ledger, keeping each payload as a leaf of the Merkle log on the way."""
    for entry in LedgerEntry.objects.order_by("seq", "id").iterator(chunk_size=_CHUNK):
        leaves.append(entry.payload.encode("utf-8"))
        yield chain.StoredLedgerEntry(entry.seq, entry.prev_hash, entry.entry_hash, entry.payload)


def _walk_trail(trail_id: str, records: Iterable[chain.StoredRecord], report: Report):
    summary = chain.verify_trail(trail_id, records)
    report.trails_checked += 1
    report.records_checked += summary.record_count
    report.failures.extend(summary.failures)
    return summary


def _empty_summary(trail_id: str) -> chain.TrailSummary:
    return chain.TrailSummary(trail_id=trail_id, head_hash=chain.genesis_hash(trail_id))


def _check_head(trail_id, summary, trail: Trail | None, ledger_payload: str | None, report):
    if ledger_payload is not None:
        present = trail is not None or summary.record_count > 0
        sealed_as = json.loads(ledger_payload)
        report.failures.extend(chain.check_sealed_trail(sealed_as, summary if present else None))
    elif trail is None:
        report.failures.append(chain.Failure("trail", trail_id, None, "trail is missing"))
    elif trail.status == Trail.Status.SEALED:
        report.failures.append(
            chain.Failure("trail", trail_id, None, "trail is sealed but has no ledger entry")
        )
    elif trail.record_count != summary.record_count:
        report.failures.append(
            chain.Failure(
                "trail",
                trail_id,
                min(trail.record_count, summary.record_count),
                f"trail has {summary.record_count} records; its head says {trail.record_count}",
            )
        )
    elif trail.head_hash != summary.head_hash:
        report.failures.append(
            chain.Failure("trail", trail_id, summary.record_count - 1, "head hash differs")
        )


def _ledger_link_failures(entry: LedgerEntry) -> list[chain.Failure]:
    """One leaf's own link: its hash, and that it extends the entry before it."""
    previous = LedgerEntry.objects.filter(seq=entry.seq - 1).first()
    expected_prev = previous.entry_hash if previous else chain.ledger_genesis_hash()
    stored = chain.StoredLedgerEntry(entry.seq, entry.prev_hash, entry.entry_hash, entry.payload)
    failures = []
    if entry.seq > 0 and previous is None:
        failures.append(chain.Failure("ledger", None, entry.seq - 1, "ledger entry missing"))
    elif entry.prev_hash != expected_prev:
        failures.append(chain.Failure("ledger", None, entry.seq, "prev_hash does not match"))
    if chain.ledger_entry_hash(stored.seq, stored.prev_hash, stored.payload) != stored.entry_hash:
        failures.append(chain.Failure("ledger", None, entry.seq, "entry_hash does not match"))
    return failures


def _stored(records) -> Iterator[chain.StoredRecord]:
    for record in records.only("trail_id", "seq", "prev_hash", "record_hash", "payload").iterator(
        chunk_size=_CHUNK
    ):
        yield chain.StoredRecord(
            str(record.trail_id), record.seq, record.prev_hash, record.record_hash, record.payload
        )


@contextmanager
def _snapshot():
    """One consistent snapshot for the whole verification (REPEATABLE READ on PostgreSQL)."""
    # Inside an enclosing transaction (a test's) the snapshot is that transaction's own.
    fresh = not connection.in_atomic_block
    with transaction.atomic():
        if fresh and connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
        yield


def _recorded(report: Report, started) -> Report:
    VerificationRun.objects.create(
        scope=report.scope[:200],
        ok=report.ok,
        trails_checked=report.trails_checked,
        records_checked=report.records_checked,
        ledger_entries_checked=report.ledger_entries_checked,
        failures=[failure.as_dict() for failure in report.failures[:1000]],
        started_at=started,
        finished_at=timezone.now(),
    )
    return report

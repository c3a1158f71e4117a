"""Transactional writes to the audit store: open a trail, append records, seal a trail.

Appends lock the trail row (SELECT ... FOR UPDATE), so records of one trail are written one
batch at a time; sealing takes a short global lock to extend the ledger, once per job rather
than per step, so many workers decode in parallel.
"""

from __future__ import annotations

import uuid

from django.db import connection, transaction
from django.utils import timezone

from . import binding, chain
from .models import DecisionRecord, LedgerEntry, Trail

# pg_advisory_xact_lock key for ledger appends ("PFLEDGER" as an integer).
_LEDGER_LOCK_KEY = int.from_bytes(b"PFLEDGER", "big") & 0x7FFF_FFFF_FFFF_FFFF


class TrailClosed(Exception):
    """An append was attempted on a sealed trail."""


def trail_open(*, job_id: uuid.UUID, attempt: int, previous_id: uuid.UUID | None = None) -> Trail:
    """A new open trail (format v2, with its own salt) for one attempt; previous_id links the
    job's earlier attempt's trail. Its first record is the request (binding.request_payload)."""
    trail_id = uuid.uuid4()
    genesis = chain.genesis_hash(str(trail_id))
    return Trail.objects.create(
        id=trail_id,
        job_id=job_id,
        attempt=attempt,
        previous_id=previous_id,
        format_version=binding.FORMAT_VERSION,
        salt=binding.new_trail_salt(),
        genesis_hash=genesis,
        head_hash=genesis,
    )


def trail_append(*, trail_id: uuid.UUID, payload: dict) -> DecisionRecord:
    """Append one record (of the kind its payload names) and commit it before returning."""
    texts = [chain.canonical_json(payload)]
    return trail_append_many(trail_id=trail_id, texts=texts, kind=binding.kind_of(payload))[-1]


def trail_append_many(
    *, trail_id: uuid.UUID, texts: list[str], kind: str = binding.DECISION
) -> list[DecisionRecord]:
    """Append records of one kind (canonical JSON texts, in order) in one transaction and
    commit them.

    One trail-row lock, one multi-row INSERT and one head update for the lot: the rows, hashes
    and trigger checks are exactly those of appending them one by one.
    """
    with transaction.atomic():
        trail = Trail.objects.select_for_update().get(pk=trail_id)
        if trail.status != Trail.Status.OPEN:
            raise TrailClosed(f"trail {trail.id} is sealed")
        seq, head = trail.record_count, trail.head_hash
        records = []
        for text in texts:
            digest = chain.record_hash(str(trail.id), seq, head, text)
            records.append(
                DecisionRecord(
                    trail=trail,
                    seq=seq,
                    kind=kind,
                    payload=text,
                    prev_hash=head,
                    record_hash=digest,
                )
            )
            seq, head = seq + 1, digest
        DecisionRecord.objects.bulk_create(records)
        Trail.objects.filter(pk=trail.pk).update(record_count=seq, head_hash=head)
    return records


def trail_seal(*, trail_id: uuid.UUID, outcome: str) -> LedgerEntry:
    """Close the trail and append its (id, record count, head) to the global ledger.

    Idempotent: sealing an already sealed trail returns its existing ledger entry. Call it inside
    the caller's transaction when the job's result must appear together with the seal.
    """
    with transaction.atomic():
        trail = Trail.objects.select_for_update().get(pk=trail_id)
        if trail.status == Trail.Status.SEALED:
            return LedgerEntry.objects.get(trail_id=trail.id)
        _lock_ledger()
        last = LedgerEntry.objects.order_by("-seq").only("seq", "entry_hash").first()
        seq = last.seq + 1 if last else 0
        prev_hash = last.entry_hash if last else chain.ledger_genesis_hash()
        payload = chain.ledger_payload(
            format_version=trail.format_version,
            trail_id=str(trail.id),
            job_id=str(trail.job_id),
            record_count=trail.record_count,
            head_hash=trail.head_hash,
            outcome=outcome,
        )
        entry = LedgerEntry.objects.create(
            seq=seq,
            trail_id=trail.id,
            payload=payload,
            prev_hash=prev_hash,
            entry_hash=chain.ledger_entry_hash(seq, prev_hash, payload),
        )
        Trail.objects.filter(pk=trail.pk).update(
            status=Trail.Status.SEALED, outcome=outcome, sealed_at=timezone.now()
        )
    return entry


def _lock_ledger() -> None:
    # SQLite's IMMEDIATE transactions already serialise writers; PostgreSQL needs the lock so two
    # seals do not both read the same ledger head (the UNIQUE constraints would reject the loser).
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [_LEDGER_LOCK_KEY])

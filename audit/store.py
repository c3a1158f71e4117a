"""Transactional writes to the audit store: open a trail, append records, seal a trail.

Appends lock the trail row (SELECT ... FOR UPDATE), so records of one trail are written one
batch at a time; sealing takes a short global lock to extend the ledger, once per job rather
than per step, so many workers decode in parallel.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import uuid

from django.db import connection, transaction
from django.utils import timezone

from .evidence import binding, chain, matter_leaves, sealing
from .models import DecisionRecord, LedgerEntry, MatterKey, Trail

# pg_advisory_xact_lock key for ledger appends ("PFLEDGER" as an integer).
_LEDGER_LOCK_KEY = int.from_bytes(b"PFLEDGER", "big") & 0x7FFF_FFFF_FFFF_FFFF


class TrailClosed(Exception):
    """An append was attempted on a sealed trail."""


class TrailMoved(Exception):
    """The trail is not where its writer left it: sealed, or extended by someone else."""


def trail_open(
    *,
    job_id: uuid.UUID,
    attempt: int,
    previous_id: uuid.UUID | None = None,
    batch_id: str = "",
) -> Trail:
    """A new open trail (the current format, with its own salt) for one attempt; previous_id
    links the job's earlier attempt's trail, batch_id names the batch whose line the job is.
    Its first record is the request (binding.request_payload)."""
    trail_id = uuid.uuid4()
    genesis = chain.genesis_hash(str(trail_id))
    return Trail.objects.create(
        id=trail_id,
        job_id=job_id,
        attempt=attempt,
        previous_id=previous_id,
        batch_id=batch_id,
        format_version=binding.FORMAT_VERSION,
        salt=binding.new_trail_salt(),
        genesis_hash=genesis,
        head_hash=genesis,
    )


def sealed_decision(
    clear: dict, trail_salt: str, format_version: int = binding.FORMAT_VERSION
) -> tuple[str, str]:
    """A clear decision payload as a format-3 or 4 trail stores it: (the canonical JSON that is
    hashed, its slots' values as canonical JSON for the row's `openings`)."""
    sealed, values = sealing.seal_decision(clear, trail_salt, format_version)
    return chain.canonical_json(sealed), chain.canonical_json(values)


def trail_append(*, trail_id: uuid.UUID, payload: dict) -> DecisionRecord:
    """Append one record (of the kind its payload names) and commit it before returning. A
    decision is given clear; a format-3 or 4 trail stores it sealed (sealed_decision)."""
    kind, text, openings = binding.kind_of(payload), chain.canonical_json(payload), None
    if kind == binding.DECISION:
        trail = Trail.objects.only("format_version", "salt").get(pk=trail_id)
        if trail.format_version >= sealing.SEALED_SINCE:
            text, values = sealed_decision(payload, trail.salt, trail.format_version)
            openings = [values]
    return trail_append_many(trail_id=trail_id, texts=[text], kind=kind, openings=openings)[-1]


def trail_append_many(
    *,
    trail_id: uuid.UUID,
    texts: list[str],
    kind: str = binding.DECISION,
    openings: list[str] | None = None,
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
        records = _chained(trail, trail.record_count, trail.head_hash, texts, kind, openings)
        DecisionRecord.objects.bulk_create(records)
        Trail.objects.filter(pk=trail.pk).update(
            record_count=records[-1].seq + 1, head_hash=records[-1].record_hash
        )
    return records


def _chained(
    trail, seq: int, head: str, texts: list[str], kind: str, openings: list[str] | None = None
) -> list[DecisionRecord]:
    records = []
    for i, text in enumerate(texts):
        digest = chain.record_hash(str(trail.id), seq, head, text)
        records.append(
            DecisionRecord(
                trail=trail,
                seq=seq,
                kind=kind,
                payload=text,
                openings=openings[i] if openings is not None else "",
                prev_hash=head,
                record_hash=digest,
            )
        )
        seq, head = seq + 1, digest
    return records


# One statement, so one round trip and its own transaction in autocommit: the trail row is
# moved on (locked, and only if it is still open and where the writer left it), then the records
# are inserted; the insert trigger checks each one's chain as for any append.
_EXTEND_SQL = """
WITH moved AS (
    UPDATE audit_trail SET record_count = %s, head_hash = %s
     WHERE id = %s AND record_count = %s AND head_hash = %s AND status = 'open'
    RETURNING id
)
INSERT INTO audit_decisionrecord
       (trail_id, seq, kind, payload, openings, prev_hash, record_hash, created_at)
SELECT moved.id, v.seq, v.kind, v.payload, v.openings, v.prev_hash, v.record_hash, now()
  FROM moved, (VALUES {rows}) AS v(seq, kind, payload, openings, prev_hash, record_hash)
"""


def trail_extend(
    *,
    trail_id: uuid.UUID,
    seq: int,
    head: str,
    texts: list[str],
    openings: list[str] | None = None,
    kind: str = binding.DECISION,
) -> tuple[int, str]:
    """Append records to an open trail whose head its writer knows (the next seq and the head
    hash it left there) and commit them, each with its sealed slots' values (`openings`,
    canonical JSON, audit format 3); return the new (next seq, head hash). TrailMoved if
    the trail is sealed or its head is elsewhere.

    The writer holding a job's lease appends every step this way: on PostgreSQL it is one
    statement (outside a transaction, a streamed step's commit is one round trip, not five);
    elsewhere the same rows and check in a transaction of its own.
    """
    trail = Trail(id=trail_id)
    records = _chained(trail, seq, head, texts, kind, openings)
    after = (records[-1].seq + 1, records[-1].record_hash)
    if connection.vendor != "postgresql":
        with transaction.atomic():
            row = Trail.objects.select_for_update().filter(pk=trail_id).first()
            if row is None or (row.status, row.record_count, row.head_hash) != ("open", seq, head):
                raise TrailMoved(f"trail {trail_id} is sealed or not at record {seq}")
            DecisionRecord.objects.bulk_create(records)
            Trail.objects.filter(pk=trail_id).update(record_count=after[0], head_hash=after[1])
        return after
    rows = ", ".join(["(%s::integer, %s, %s, %s, %s, %s)"] * len(records))
    params = [after[0], after[1], str(trail_id), seq, head]
    for record in records:
        params += [
            record.seq,
            kind,
            record.payload,
            record.openings,
            record.prev_hash,
            record.record_hash,
        ]
    # Inside a caller's transaction a savepoint keeps a failed statement from aborting it; in
    # autocommit (a worker) the statement is its own transaction.
    scope = transaction.atomic() if connection.in_atomic_block else contextlib.nullcontext()
    with scope, connection.cursor() as cursor:
        cursor.execute(_EXTEND_SQL.format(rows=rows), params)
        if cursor.rowcount != len(records):
            raise TrailMoved(f"trail {trail_id} is sealed or not at record {seq}")
    return after


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
        sealed_at = timezone.now()
        tag, submitted_at, batch = _matter_tags(trail)
        payload = chain.ledger_payload(
            format_version=trail.format_version,
            trail_id=str(trail.id),
            job_id=str(trail.job_id),
            record_count=trail.record_count,
            head_hash=trail.head_hash,
            outcome=outcome,
            tagged=(tag, matter_leaves.utc_time(sealed_at)),
            selection=(submitted_at, batch),
        )
        entry = LedgerEntry.objects.create(
            seq=seq,
            trail_id=trail.id,
            payload=payload,
            prev_hash=prev_hash,
            entry_hash=chain.ledger_entry_hash(seq, prev_hash, payload),
        )
        Trail.objects.filter(pk=trail.pk).update(
            status=Trail.Status.SEALED, outcome=outcome, sealed_at=sealed_at
        )
    return entry


def _matter_tags(trail: Trail) -> tuple[str | None, str | None, str | None]:
    """The leaf's matter tag, submission time and batch tag, of the matter and the time its
    request record names (all None when it recorded none). Called under the ledger lock, which
    also serialises making a matter's key."""
    payload = (
        DecisionRecord.objects.filter(trail=trail, kind=DecisionRecord.Kind.REQUEST)
        .values_list("payload", flat=True)
        .first()
    )
    if payload is None:
        return None, None, None
    request = json.loads(payload)
    key = matter_key(request["matter"])
    trail_id = str(trail.id)
    return (
        matter_leaves.matter_tag(key, trail_id),
        request["submitted_at"],
        matter_leaves.batch_tag(key, trail_id, trail.batch_id),
    )


def matter_key(matter: str) -> str:
    """The matter's tag key, made when first asked for (under the ledger lock when sealing)."""
    key = MatterKey.objects.filter(matter=matter).values_list("key", flat=True).first()
    if key is None:
        made = MatterKey.objects.get_or_create(
            matter=matter, defaults={"key": secrets.token_hex(32)}
        )
        key = made[0].key
    return key


def _lock_ledger() -> None:
    # SQLite's IMMEDIATE transactions already serialise writers; PostgreSQL needs the lock so two
    # seals do not both read the same ledger head (the UNIQUE constraints would reject the loser).
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [_LEDGER_LOCK_KEY])

"""Invariant 6: the database itself refuses to rewrite audit history, whatever the client."""

import pytest
from django.db import DatabaseError, connection, transaction

from audit.models import DecisionRecord, LedgerEntry, Trail

REFUSED = pytest.raises(DatabaseError)


def execute(sql, params=None):
    # Each statement in its own savepoint, so a refused one leaves the test transaction usable.
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(sql, params)


@pytest.fixture
def sealed(run_job):
    job = run_job()
    return Trail.objects.get(pk=job.trail_id)


def test_the_application_cannot_update_or_delete_a_record(sealed):
    record = DecisionRecord.objects.filter(trail=sealed).first()
    with REFUSED as update, transaction.atomic():
        DecisionRecord.objects.filter(pk=record.pk).update(payload="{}")
    assert "append-only" in str(update.value)
    with REFUSED, transaction.atomic():
        record.delete()


@pytest.mark.parametrize(
    "table",
    [
        "audit_decisionrecord",
        "audit_ledgerentry",
        "audit_trail",
        "audit_verificationrun",
        "audit_matterkey",
    ],
)
def test_truncate_is_refused(sealed, table):
    # Fire the deferred foreign-key checks of the setup now, or PostgreSQL refuses TRUNCATE for
    # that reason before our trigger is reached.
    execute("SET CONSTRAINTS ALL IMMEDIATE")
    with REFUSED as error:
        execute(f"TRUNCATE {table} CASCADE")
    assert "append-only" in str(error.value)


@pytest.mark.parametrize(
    "statement",
    [
        "UPDATE audit_decisionrecord SET payload = '{}'",
        "DELETE FROM audit_decisionrecord",
        "UPDATE audit_ledgerentry SET payload = '{}'",
        "DELETE FROM audit_ledgerentry",
        "UPDATE audit_trail SET record_count = 0",
        "DELETE FROM audit_trail",
        "UPDATE audit_matterkey SET key = repeat('0', 64)",
        "DELETE FROM audit_matterkey",
    ],
)
def test_triggers_still_fire_under_session_replication_role_replica(sealed, statement):
    execute("SET LOCAL session_replication_role = replica")
    with REFUSED:
        execute(statement)


def test_a_matters_tag_key_is_made_once_and_never_changed(sealed):
    """Replacing a matter's key would untag its leaves and hide them from the completeness
    check (audit.evidence.matter_leaves): the database refuses it."""
    from audit.models import MatterKey

    key = MatterKey.objects.get()
    with REFUSED as update, transaction.atomic():
        MatterKey.objects.filter(pk=key.pk).update(key="0" * 64)
    assert "append-only" in str(update.value)


def test_an_insert_that_does_not_extend_the_head_is_refused(run_job):
    job = run_job()
    trail = Trail.objects.create(
        job_id=job.id, attempt=99, genesis_hash="a" * 64, head_hash="a" * 64
    )
    insert = (
        "INSERT INTO audit_decisionrecord (trail_id, seq, payload, prev_hash, record_hash,"
        " created_at) VALUES (%s, %s, '{}', %s, %s, now())"
    )
    with REFUSED as wrong_seq:
        execute(insert, [trail.id, 1, "a" * 64, "b" * 64])
    assert "head+1" in str(wrong_seq.value)
    with REFUSED as wrong_prev:
        execute(insert, [trail.id, 0, "c" * 64, "b" * 64])
    assert "chain" in str(wrong_prev.value)
    execute(insert, [trail.id, 0, "a" * 64, "b" * 64])  # the one correct link is accepted


def test_a_sealed_trail_takes_no_more_records(sealed):
    insert = (
        "INSERT INTO audit_decisionrecord (trail_id, seq, payload, prev_hash, record_hash,"
        " created_at) VALUES (%s, %s, '{}', %s, %s, now())"
    )
    with REFUSED as error:
        execute(insert, [sealed.id, sealed.record_count, sealed.head_hash, "d" * 64])
    assert "sealed" in str(error.value)


def test_a_ledger_entry_that_does_not_extend_the_ledger_is_refused(sealed):
    entry = LedgerEntry.objects.get(trail_id=sealed.id)
    with REFUSED:
        execute(
            "INSERT INTO audit_ledgerentry (seq, trail_id, payload, prev_hash, entry_hash,"
            " created_at) VALUES (%s, gen_random_uuid(), '{}', %s, %s, now())",
            [entry.seq + 5, entry.entry_hash, "e" * 64],
        )

"""Invariant 5: every probe of the catalogue is caught and the report names the broken link.

Each probe is raw SQL run as a rogue superuser would run it: it switches the append-only
triggers and foreign keys off first, so only detection stands between it and the evidence.
"""

import pytest
from django.core.management import call_command
from django.db import connection

from audit.evidence import chain
from audit.models import Trail
from audit.verification import verify_everything, verify_trails

TABLES = ("audit_decisionrecord", "audit_trail", "audit_ledgerentry", "audit_matterkey")


def rogue(sql, params=None):
    with connection.cursor() as cursor:
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")  # settle the setup's deferred checks
        for table in TABLES:
            cursor.execute(f"ALTER TABLE {table} DISABLE TRIGGER ALL")
        cursor.execute(sql, params)
    # The test transaction's rollback switches the triggers back on.


def record_row(trail_id, seq) -> dict:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT id, payload, prev_hash, record_hash FROM audit_decisionrecord"
            " WHERE trail_id = %s AND seq = %s",
            [trail_id, seq],
        )
        pk, payload, prev_hash, record_hash = cursor.fetchone()
    return {"id": pk, "payload": payload, "prev_hash": prev_hash, "record_hash": record_hash}


@pytest.fixture
def trails(run_job):
    """Two sealed trails of at least six records each."""
    found = []
    for prompt in ((1, 2, 3), (7, 8)):
        job = run_job(prompt=prompt, max_tokens=40, draft_length=3)
        found.append(Trail.objects.get(pk=job.trail_id))
    assert all(trail.record_count >= 6 for trail in found)
    return found


def broken_links(report) -> list[tuple[str | None, int | None]]:
    return [(failure.trail_id, failure.seq) for failure in report.failures]


def test_untouched_trails_and_ledger_verify(trails):
    report = verify_everything()
    assert report.ok, report.failures
    assert (report.trails_checked, report.ledger_entries_checked) == (2, 2)


def flip(value: str) -> str:
    return ("0" if value[5] != "0" else "1").join((value[:5], value[6:]))


PROBES = {
    "flip a byte of a payload": (
        "UPDATE audit_decisionrecord SET payload = replace(payload, '\"step\":1', '\"step\":3')"
        " WHERE trail_id = %(t)s AND seq = 2",
        2,
    ),
    "flip a byte of prev_hash": (
        "UPDATE audit_decisionrecord SET prev_hash = %(flipped_prev)s"
        " WHERE trail_id = %(t)s AND seq = 2",
        2,
    ),
    "flip a byte of record_hash": (
        "UPDATE audit_decisionrecord SET record_hash = %(flipped_hash)s"
        " WHERE trail_id = %(t)s AND seq = 2",
        2,
    ),
    "seq + 1 on the last record": (
        "UPDATE audit_decisionrecord SET seq = seq + 1 WHERE trail_id = %(t)s AND seq = %(last)s",
        "last",
    ),
    "seq - 1 on a middle record": (
        "ALTER TABLE audit_decisionrecord DROP CONSTRAINT audit_record_trail_seq;"
        " UPDATE audit_decisionrecord SET seq = 2 WHERE trail_id = %(t)s AND seq = 3",
        3,
    ),
    "delete a middle record": (
        "DELETE FROM audit_decisionrecord WHERE trail_id = %(t)s AND seq = 3",
        3,
    ),
    "delete the last record": (
        "DELETE FROM audit_decisionrecord WHERE trail_id = %(t)s AND seq = %(last)s",
        "last",
    ),
    "insert a forged record after the head": (
        "INSERT INTO audit_decisionrecord (trail_id, seq, payload, prev_hash, record_hash,"
        " created_at) VALUES (%(t)s, %(count)s, %(forged_payload)s, %(head)s, %(forged_hash)s,"
        " now())",
        "count",
    ),
    "duplicate a record": (
        "ALTER TABLE audit_decisionrecord DROP CONSTRAINT audit_record_trail_seq;"
        " ALTER TABLE audit_decisionrecord DROP CONSTRAINT audit_record_trail_prev;"
        " INSERT INTO audit_decisionrecord (trail_id, seq, payload, prev_hash, record_hash,"
        " created_at) SELECT trail_id, seq, payload, prev_hash, record_hash, created_at"
        " FROM audit_decisionrecord WHERE trail_id = %(t)s AND seq = 2",
        2,
    ),
    "swap two records": (
        "UPDATE audit_decisionrecord AS r SET payload = o.payload FROM audit_decisionrecord AS o"
        " WHERE r.trail_id = %(t)s AND o.trail_id = %(t)s"
        " AND ((r.seq = 2 AND o.seq = 3) OR (r.seq = 3 AND o.seq = 2))",
        2,
    ),
    "move a record to another trail": (
        "UPDATE audit_decisionrecord SET trail_id = %(other)s, seq = %(other_count)s,"
        " prev_hash = %(other_head)s WHERE trail_id = %(t)s AND seq = 3",
        3,
    ),
}


@pytest.mark.parametrize("probe", PROBES)
def test_every_probe_is_caught_and_the_broken_link_named(trails, probe):
    trail, other = trails
    sql, expected_seq = PROBES[probe]
    last = trail.record_count - 1
    forged_payload = chain.canonical_json({"step": trail.record_count, "emitted": [1]})
    params = {
        "t": trail.id,
        "last": last,
        "count": trail.record_count,
        "head": trail.head_hash,
        "flipped_prev": flip(record_row(trail.id, 2)["prev_hash"]),
        "flipped_hash": flip(record_row(trail.id, 2)["record_hash"]),
        "forged_payload": forged_payload,
        "forged_hash": chain.record_hash(
            str(trail.id), trail.record_count, trail.head_hash, forged_payload
        ),
        "other": other.id,
        "other_count": other.record_count,
        "other_head": other.head_hash,
    }
    expected_seq = {"last": last, "count": trail.record_count}.get(expected_seq, expected_seq)
    rogue(sql, params)

    for report in (verify_trails([trail.id], scope="probe"), verify_everything()):
        assert not report.ok, f"{probe} went unnoticed"
        assert (str(trail.id), expected_seq) in broken_links(report), report.failures
    if probe == "move a record to another trail":
        # Its hash binds it to its own trail: at its new place it breaks the other chain too.
        assert (str(other.id), other.record_count) in broken_links(verify_everything())


def test_deleting_a_whole_trail_is_caught_by_the_ledger(trails):
    trail, _ = trails
    rogue("DELETE FROM audit_decisionrecord WHERE trail_id = %s", [trail.id])
    rogue("DELETE FROM audit_trail WHERE id = %s", [trail.id])
    for report in (verify_trails([trail.id], scope="probe"), verify_everything()):
        failures = [f for f in report.failures if f.trail_id == str(trail.id)]
        assert failures and "missing" in failures[0].reason


def test_rewriting_a_ledger_leaf_is_caught(trails):
    trail, _ = trails
    rogue(
        "UPDATE audit_ledgerentry SET payload = replace(payload, '\"records\":', '\"records\":1')"
        " WHERE trail_id = %s",
        [trail.id],
    )
    report = verify_everything()
    assert any(f.scope == "ledger" for f in report.failures)


def test_a_replaced_matter_key_is_caught(trails):
    """A new key for the matter would untag its leaves and hide them from a matter bundle's
    completeness check: every verification names each trail whose tag it no longer makes."""
    rogue("UPDATE audit_matterkey SET key = repeat('0', 64)")
    for report in (
        verify_trails([t.id for t in trails], scope="probe"),
        verify_everything(full=True),
        verify_everything(),
    ):
        named = {f.trail_id for f in report.failures if "matter_tag" in f.reason}
        assert named == {str(t.id) for t in trails}, report.failures


def test_verify_chain_exits_1_and_names_each_broken_link(trails, capsys):
    trail, _ = trails
    rogue(PROBES["delete a middle record"][0], {"t": trail.id})
    with pytest.raises(SystemExit) as exit_info:
        call_command("verify_chain", "--trail", str(trail.id))
    assert exit_info.value.code == 1
    out = capsys.readouterr().out
    assert "BROKEN" in out
    assert f"trail {trail.id} seq 3: record missing" in out

"""The insert triggers find the head with one index probe instead of scanning the trail (or the
whole ledger) on every insert: the earlier UNION ALL form made a trail O(n^2) to write."""

from django.db import migrations

from audit.evidence.chain import ledger_genesis_hash

RECORD_CHECK = """
CREATE OR REPLACE FUNCTION audit_record_check_insert() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    trail_status text;
    genesis text;
    head_seq bigint;
    expected_prev text;
BEGIN
    SELECT status, genesis_hash INTO trail_status, genesis
        FROM audit_trail WHERE id = NEW.trail_id;
    IF trail_status IS DISTINCT FROM 'open' THEN
        RAISE EXCEPTION 'trail % is missing or sealed', NEW.trail_id
            USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    SELECT seq, record_hash INTO head_seq, expected_prev FROM audit_decisionrecord
        WHERE trail_id = NEW.trail_id ORDER BY seq DESC LIMIT 1;
    IF NOT FOUND THEN
        head_seq := -1;
        expected_prev := genesis;
    END IF;
    IF NEW.seq <> head_seq + 1 THEN
        RAISE EXCEPTION 'record seq % of trail % is not head+1 (%)', NEW.seq, NEW.trail_id,
            head_seq + 1 USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    IF NEW.prev_hash <> expected_prev THEN
        RAISE EXCEPTION 'record % of trail % does not chain to its predecessor', NEW.seq,
            NEW.trail_id USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    RETURN NEW;
END $$;
"""

LEDGER_CHECK = f"""
CREATE OR REPLACE FUNCTION audit_ledger_check_insert() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    head_seq bigint;
    expected_prev text;
BEGIN
    SELECT seq, entry_hash INTO head_seq, expected_prev FROM audit_ledgerentry
        ORDER BY seq DESC LIMIT 1;
    IF NOT FOUND THEN
        head_seq := -1;
        expected_prev := '{ledger_genesis_hash()}';
    END IF;
    IF NEW.seq <> head_seq + 1 OR NEW.prev_hash <> expected_prev THEN
        RAISE EXCEPTION 'ledger entry % does not extend the ledger head', NEW.seq
            USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    RETURN NEW;
END $$;
"""


def replace_functions(apps, schema_editor):
    # SQLite's triggers already look the head up through the (trail, seq) index.
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(RECORD_CHECK, params=None)
        schema_editor.execute(LEDGER_CHECK, params=None)


class Migration(migrations.Migration):
    dependencies = [("audit", "0004_checkpoint_append_only")]

    operations = [migrations.RunPython(replace_functions, migrations.RunPython.noop)]

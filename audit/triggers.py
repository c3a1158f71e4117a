"""Database triggers that make the audit tables append-only in the database itself (invariant 6).

They are a backstop behind the hash chain: they stop the application's own connection (and a
careless operator) from rewriting history; detection by audit.chain remains the guarantee.
PostgreSQL triggers are ENABLE ALWAYS so `session_replication_role = replica` does not skip them.
"""

from .chain import ledger_genesis_hash

# Tables whose rows may never change or disappear.
APPEND_ONLY_TABLES = ("audit_decisionrecord", "audit_ledgerentry", "audit_verificationrun")

# Migration 0005 replaces the two insert checks below with indexed head lookups.
POSTGRES_FUNCTIONS = f"""
CREATE OR REPLACE FUNCTION audit_reject_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'audit rows are append-only: % on % rejected', TG_OP, TG_TABLE_NAME
        USING ERRCODE = 'insufficient_privilege';
END $$;

CREATE OR REPLACE FUNCTION audit_trail_check_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.status <> 'open' THEN
        RAISE EXCEPTION 'trail % is sealed and cannot change', OLD.id
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF NEW.id <> OLD.id OR NEW.job_id <> OLD.job_id OR NEW.attempt <> OLD.attempt
       OR NEW.genesis_hash <> OLD.genesis_hash THEN
        RAISE EXCEPTION 'the identity of trail % cannot change', OLD.id
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    RETURN NEW;
END $$;

CREATE OR REPLACE FUNCTION audit_record_check_insert() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    trail_status text;
    expected_prev text;
    head_seq bigint;
BEGIN
    SELECT status, genesis_hash INTO trail_status, expected_prev
        FROM audit_trail WHERE id = NEW.trail_id;
    IF trail_status IS DISTINCT FROM 'open' THEN
        RAISE EXCEPTION 'trail % is missing or sealed', NEW.trail_id
            USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    SELECT seq, record_hash INTO head_seq, expected_prev FROM (
        SELECT seq, record_hash FROM audit_decisionrecord WHERE trail_id = NEW.trail_id
        UNION ALL SELECT -1, expected_prev
    ) AS chain ORDER BY seq DESC LIMIT 1;
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

CREATE OR REPLACE FUNCTION audit_ledger_check_insert() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    head_seq bigint;
    expected_prev text;
BEGIN
    SELECT seq, entry_hash INTO head_seq, expected_prev FROM (
        SELECT seq, entry_hash FROM audit_ledgerentry
        UNION ALL SELECT -1, '{ledger_genesis_hash()}'
    ) AS chain ORDER BY seq DESC LIMIT 1;
    IF NEW.seq <> head_seq + 1 OR NEW.prev_hash <> expected_prev THEN
        RAISE EXCEPTION 'ledger entry % does not extend the ledger head', NEW.seq
            USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    RETURN NEW;
END $$;
"""


def _postgres_triggers() -> list[str]:
    statements = [POSTGRES_FUNCTIONS]
    triggers = [
        (
            "audit_record_insert",
            "audit_decisionrecord",
            "BEFORE INSERT",
            "ROW",
            "audit_record_check_insert",
        ),
        (
            "audit_ledger_insert",
            "audit_ledgerentry",
            "BEFORE INSERT",
            "ROW",
            "audit_ledger_check_insert",
        ),
        ("audit_trail_update", "audit_trail", "BEFORE UPDATE", "ROW", "audit_trail_check_update"),
        ("audit_trail_delete", "audit_trail", "BEFORE DELETE", "ROW", "audit_reject_change"),
        (
            "audit_trail_truncate",
            "audit_trail",
            "BEFORE TRUNCATE",
            "STATEMENT",
            "audit_reject_change",
        ),
    ]
    for name, table, when, level, function in triggers:
        statements += _postgres_trigger(name, table, when, level, function)
    for table in APPEND_ONLY_TABLES:
        statements += _postgres_append_only(table)
    return statements


def _postgres_trigger(name, table, when, level, function) -> list[str]:
    return [
        f"CREATE TRIGGER {name} {when} ON {table} FOR EACH {level} EXECUTE FUNCTION {function}()",
        f"ALTER TABLE {table} ENABLE ALWAYS TRIGGER {name}",
    ]


def _postgres_append_only(table: str) -> list[str]:
    return [
        *_postgres_trigger(
            f"{table}_no_change", table, "BEFORE UPDATE OR DELETE", "ROW", "audit_reject_change"
        ),
        *_postgres_trigger(
            f"{table}_no_truncate", table, "BEFORE TRUNCATE", "STATEMENT", "audit_reject_change"
        ),
    ]


def _sqlite_append_only(table: str) -> list[str]:
    return [
        f"""CREATE TRIGGER {table}_no_{operation.lower()} BEFORE {operation} ON {table}
        BEGIN SELECT RAISE(ABORT, 'audit rows are append-only'); END"""
        for operation in ("UPDATE", "DELETE")
    ]


def _sqlite_triggers() -> list[str]:
    statements = [
        """CREATE TRIGGER audit_record_insert BEFORE INSERT ON audit_decisionrecord BEGIN
            SELECT RAISE(ABORT, 'trail is missing or sealed')
             WHERE COALESCE((SELECT status FROM audit_trail WHERE id = NEW.trail_id), '') <> 'open';
            SELECT RAISE(ABORT, 'record seq is not head+1')
             WHERE NEW.seq <> (SELECT COALESCE(MAX(seq), -1) + 1 FROM audit_decisionrecord
                               WHERE trail_id = NEW.trail_id);
            SELECT RAISE(ABORT, 'record does not chain to its predecessor')
             WHERE NEW.prev_hash <> COALESCE(
                (SELECT record_hash FROM audit_decisionrecord
                  WHERE trail_id = NEW.trail_id AND seq = NEW.seq - 1),
                (SELECT genesis_hash FROM audit_trail WHERE id = NEW.trail_id));
        END""",
        f"""CREATE TRIGGER audit_ledger_insert BEFORE INSERT ON audit_ledgerentry BEGIN
            SELECT RAISE(ABORT, 'ledger entry does not extend the ledger head')
             WHERE NEW.seq <> (SELECT COALESCE(MAX(seq), -1) + 1 FROM audit_ledgerentry)
                OR NEW.prev_hash <> COALESCE(
                    (SELECT entry_hash FROM audit_ledgerentry ORDER BY seq DESC LIMIT 1),
                    '{ledger_genesis_hash()}');
        END""",
        """CREATE TRIGGER audit_trail_update BEFORE UPDATE ON audit_trail
           WHEN OLD.status <> 'open' OR NEW.id <> OLD.id OR NEW.job_id <> OLD.job_id
             OR NEW.attempt <> OLD.attempt OR NEW.genesis_hash <> OLD.genesis_hash BEGIN
            SELECT RAISE(ABORT, 'a sealed trail, or a trail identity, cannot change');
        END""",
        """CREATE TRIGGER audit_trail_delete BEFORE DELETE ON audit_trail BEGIN
            SELECT RAISE(ABORT, 'audit rows are append-only');
        END""",
    ]
    for table in APPEND_ONLY_TABLES:
        statements += _sqlite_append_only(table)
    return statements


def _execute(schema_editor, builders: dict) -> None:
    vendor = schema_editor.connection.vendor
    if vendor not in builders:
        raise NotImplementedError(f"no audit triggers for database vendor {vendor!r}")
    for statement in builders[vendor]():
        schema_editor.execute(statement, params=None)  # no placeholders: keep % literal


def install(apps, schema_editor) -> None:
    """Migration 0002: the chain checks and the append-only tables of the first schema."""
    _execute(schema_editor, {"postgresql": _postgres_triggers, "sqlite": _sqlite_triggers})


def append_only(table: str):
    """A RunPython function making a table added later append-only (the function in
    audit_reject_change exists since migration 0002)."""

    def install_for_table(apps, schema_editor) -> None:
        _execute(
            schema_editor,
            {
                "postgresql": lambda: _postgres_append_only(table),
                "sqlite": lambda: _sqlite_append_only(table),
            },
        )

    return install_for_table

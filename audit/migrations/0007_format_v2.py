"""Audit format v2: a trail names its format version and keeps the salt of its bound texts; a
record says its kind (request, decision, answer). Both are part of a trail's identity, which the
update trigger freezes.

The trigger functions also get a pinned search_path (the tables' schema, then pg_temp last):
without it the application role could create TEMP tables named like ours, which the functions
would read first, and slip an insert past the chain checks.

The SQL is frozen here, not imported: a migration must keep meaning what it meant.
"""

from django.db import migrations, models

TRAIL_CHECK = """
CREATE OR REPLACE FUNCTION audit_trail_check_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.status <> 'open' THEN
        RAISE EXCEPTION 'trail % is sealed and cannot change', OLD.id
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF NEW.id <> OLD.id OR NEW.job_id <> OLD.job_id OR NEW.attempt <> OLD.attempt
       OR NEW.genesis_hash <> OLD.genesis_hash OR NEW.format_version <> OLD.format_version
       OR NEW.salt <> OLD.salt OR NEW.previous_id IS DISTINCT FROM OLD.previous_id THEN
        RAISE EXCEPTION 'the identity of trail % cannot change', OLD.id
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    RETURN NEW;
END $$;
"""

FUNCTIONS = (
    "audit_reject_change()",
    "audit_trail_check_update()",
    "audit_record_check_insert()",
    "audit_ledger_check_insert()",
)

SQLITE_TRAIL_CHECK = """
CREATE TRIGGER audit_trail_update BEFORE UPDATE ON audit_trail
   WHEN OLD.status <> 'open' OR NEW.id <> OLD.id OR NEW.job_id <> OLD.job_id
     OR NEW.attempt <> OLD.attempt OR NEW.genesis_hash <> OLD.genesis_hash
     OR NEW.format_version <> OLD.format_version OR NEW.salt <> OLD.salt
     OR NEW.previous_id IS NOT OLD.previous_id BEGIN
    SELECT RAISE(ABORT, 'a sealed trail, or a trail identity, cannot change');
END
"""

# Plain ADD COLUMN with a constant default on both databases: Django's SQLite schema editor
# would rebuild the tables instead, dropping their triggers with them.
ADD_COLUMNS = (
    "ALTER TABLE audit_trail ADD COLUMN format_version smallint NOT NULL DEFAULT 1",
    "ALTER TABLE audit_trail ADD COLUMN salt varchar(64) NOT NULL DEFAULT ''",
    "ALTER TABLE audit_decisionrecord ADD COLUMN kind varchar(16) NOT NULL DEFAULT 'decision'",
)


def forwards(apps, schema_editor):
    execute = schema_editor.execute
    for statement in ADD_COLUMNS:
        execute(statement, params=None)
    if schema_editor.connection.vendor == "postgresql":
        execute(TRAIL_CHECK, params=None)
        with schema_editor.connection.cursor() as cursor:
            cursor.execute("SELECT current_schema()")
            (schema,) = cursor.fetchone()
        for function in FUNCTIONS:
            execute(
                f"ALTER FUNCTION {function} SET search_path = "
                f"{schema_editor.quote_name(schema)}, pg_temp",
                params=None,
            )
    else:
        execute("DROP TRIGGER audit_trail_update", params=None)
        execute(SQLITE_TRAIL_CHECK, params=None)


class Migration(migrations.Migration):
    dependencies = [("audit", "0006_trail_previous_and_task_locks")]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[migrations.RunPython(forwards, migrations.RunPython.noop)],
            state_operations=[
                migrations.AddField(
                    model_name="trail",
                    name="format_version",
                    field=models.PositiveSmallIntegerField(default=1),
                ),
                migrations.AddField(
                    model_name="trail",
                    name="salt",
                    field=models.CharField(blank=True, default="", max_length=64),
                ),
                migrations.AddField(
                    model_name="decisionrecord",
                    name="kind",
                    field=models.CharField(
                        choices=[
                            ("request", "Request"),
                            ("decision", "Decision"),
                            ("answer", "Answer"),
                        ],
                        default="decision",
                        max_length=16,
                    ),
                ),
                migrations.AlterModelOptions(name="verificationrun", options={"ordering": ["-id"]}),
            ],
        ),
    ]

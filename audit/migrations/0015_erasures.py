"""Destruction with proofs kept: a trail's salt and its decisions' openings may be blanked, and
nothing else of it changed, once an Erasure row names the trail (append-only itself).

The statements are frozen in SQL files beside this one (on SQLite, which cannot replace a
trigger, the two it replaces are dropped first, as migration 0007 did); the new trigger
functions then get the pinned search_path every audit trigger function has (0007 says why).
"""

from django.db import migrations, models

from audit import frozen_sql

FUNCTIONS = ("audit_trail_check_update()", "audit_record_check_change()")
SQLITE_REPLACED = ("audit_trail_update", "audit_decisionrecord_no_update")


def forwards(apps, schema_editor):
    if schema_editor.connection.vendor == "sqlite":
        for trigger in SQLITE_REPLACED:
            schema_editor.execute(f"DROP TRIGGER {trigger}", params=None)
    frozen_sql.run(__file__)(apps, schema_editor)
    if schema_editor.connection.vendor != "postgresql":
        return
    with schema_editor.connection.cursor() as cursor:
        cursor.execute("SELECT current_schema()")
        (schema,) = cursor.fetchone()
    for function in FUNCTIONS:
        schema_editor.execute(
            f"ALTER FUNCTION {function} SET search_path = "
            f"{schema_editor.quote_name(schema)}, pg_temp",
            params=None,
        )


class Migration(migrations.Migration):
    dependencies = [("audit", "0014_trail_batch_id")]

    operations = [
        migrations.CreateModel(
            name="Erasure",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                ("trail_id", models.UUIDField(unique=True)),
                ("job_id", models.UUIDField(db_index=True)),
                ("matter", models.CharField(max_length=200)),
                (
                    "order",
                    models.TextField(
                        help_text="the order or retention rule it was destroyed under"
                    ),
                ),
                ("erased_by", models.CharField(max_length=200)),
                ("erased_at", models.DateTimeField()),
            ],
            options={"ordering": ["-erased_at", "-id"]},
        ),
        migrations.RunPython(forwards, migrations.RunPython.noop),
    ]

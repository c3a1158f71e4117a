"""A checkpoint keeps its RFC 3161 timestamp token. A nullable column added in place: the table
is append-only, and Django's SQLite editor would rebuild it (dropping its triggers) otherwise."""

from django.db import migrations, models


def forwards(apps, schema_editor):
    column = "bytea" if schema_editor.connection.vendor == "postgresql" else "BLOB"
    schema_editor.execute(
        f"ALTER TABLE audit_checkpoint ADD COLUMN timestamp_token {column} NULL", params=None
    )


class Migration(migrations.Migration):
    dependencies = [("audit", "0007_format_v2")]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[migrations.RunPython(forwards, migrations.RunPython.noop)],
            state_operations=[
                migrations.AddField(
                    model_name="checkpoint",
                    name="timestamp_token",
                    field=models.BinaryField(blank=True, null=True),
                ),
                migrations.AlterField(
                    model_name="checkpoint",
                    name="note",
                    field=models.TextField(
                        help_text="the signed note with its cosignatures, as published"
                    ),
                ),
            ],
        )
    ]

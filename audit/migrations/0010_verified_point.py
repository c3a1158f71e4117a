"""A verification run's verified-up-to point (audit.anchored), and an index of the request and
answer records alone.

Plain ADD COLUMN with constant defaults on both databases, as in 0007: Django's SQLite schema
editor would rebuild the append-only table instead, dropping its triggers with it.
"""

from django.db import migrations, models

ADD_COLUMNS = (
    "ALTER TABLE audit_verificationrun ADD COLUMN records_covered bigint NOT NULL DEFAULT 0",
    "ALTER TABLE audit_verificationrun ADD COLUMN anchored_size bigint NULL",
    "ALTER TABLE audit_verificationrun ADD COLUMN anchored_root varchar(64) NOT NULL DEFAULT ''",
    "ALTER TABLE audit_verificationrun ADD COLUMN snapshot_xmin bigint NULL",
    "ALTER TABLE audit_verificationrun ADD COLUMN point_mac varchar(64) NOT NULL DEFAULT ''",
)


def forwards(apps, schema_editor):
    for statement in ADD_COLUMNS:
        schema_editor.execute(statement, params=None)


class Migration(migrations.Migration):
    dependencies = [("audit", "0009_log_tiles")]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[migrations.RunPython(forwards, migrations.RunPython.noop)],
            state_operations=[
                migrations.AddField(
                    model_name="verificationrun",
                    name="records_covered",
                    field=models.PositiveBigIntegerField(default=0),
                ),
                migrations.AddField(
                    model_name="verificationrun",
                    name="anchored_size",
                    field=models.PositiveBigIntegerField(blank=True, null=True),
                ),
                migrations.AddField(
                    model_name="verificationrun",
                    name="anchored_root",
                    field=models.CharField(blank=True, max_length=64),
                ),
                migrations.AddField(
                    model_name="verificationrun",
                    name="snapshot_xmin",
                    field=models.BigIntegerField(blank=True, null=True),
                ),
                migrations.AddField(
                    model_name="verificationrun",
                    name="point_mac",
                    field=models.CharField(blank=True, max_length=64),
                ),
            ],
        ),
        migrations.AddIndex(
            model_name="decisionrecord",
            index=models.Index(
                condition=models.Q(("kind", "decision"), _negated=True),
                fields=["trail", "seq"],
                name="audit_record_bound",
            ),
        ),
    ]

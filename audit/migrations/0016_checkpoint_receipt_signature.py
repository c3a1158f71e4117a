"""A checkpoint keeps the log key's signature of its root for COSE receipts (ADR 0030), made when
the checkpoint is signed, so any host can give out a trail's receipt without the key. A nullable
column added in place, frozen in SQL files beside this one: the table is append-only, and
Django's SQLite editor would rebuild it (dropping its triggers) otherwise."""

from django.db import migrations, models

from audit import frozen_sql


class Migration(migrations.Migration):
    dependencies = [("audit", "0015_erasures")]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[
                migrations.RunPython(frozen_sql.run(__file__), migrations.RunPython.noop)
            ],
            state_operations=[
                migrations.AddField(
                    model_name="checkpoint",
                    name="receipt_signature",
                    field=models.BinaryField(blank=True, null=True),
                )
            ],
        )
    ]

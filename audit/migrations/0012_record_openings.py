"""Audit format 3: a decision record's row keeps the values of the token slots its payload
commits to (audit.evidence.sealing), beside the hashed payload.

A plain ADD COLUMN with a constant default, frozen in SQL files beside this one: Django's SQLite
schema editor would rebuild the table instead, dropping its append-only triggers with it.
"""

from django.db import migrations, models

from audit import frozen_sql


class Migration(migrations.Migration):
    dependencies = [("audit", "0011_matter_keys")]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[
                migrations.RunPython(frozen_sql.run(__file__), migrations.RunPython.noop)
            ],
            state_operations=[
                migrations.AddField(
                    model_name="decisionrecord",
                    name="openings",
                    field=models.TextField(blank=True, default=""),
                )
            ],
        )
    ]

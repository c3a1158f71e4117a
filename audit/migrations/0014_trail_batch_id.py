"""The batch a trail's job is a line of, which its leaf's batch_tag states from matter format 3
on (audit.evidence.matter_leaves.batch_tag).

A plain ADD COLUMN with a constant default, frozen in SQL files beside this one: Django's SQLite
schema editor would rebuild the table instead, dropping its append-only triggers with it.
"""

from django.db import migrations, models

from audit import frozen_sql


class Migration(migrations.Migration):
    dependencies = [("audit", "0013_task_lock_asked_again")]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[
                migrations.RunPython(frozen_sql.run(__file__), migrations.RunPython.noop)
            ],
            state_operations=[
                migrations.AddField(
                    model_name="trail",
                    name="batch_id",
                    field=models.CharField(blank=True, default="", max_length=40),
                )
            ],
        )
    ]

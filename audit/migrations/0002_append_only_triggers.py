from django.db import migrations

from audit import frozen_sql


class Migration(migrations.Migration):
    dependencies = [("audit", "0001_initial")]

    # Irreversible on purpose: dropping the protection is a decision for a DBA, not a rollback.
    operations = [
        migrations.RunPython(frozen_sql.run(__file__), migrations.RunPython.noop, elidable=False)
    ]

from django.db import migrations

from audit import frozen_sql


class Migration(migrations.Migration):
    # audit_reject_change(), which the triggers call, is created by audit's migration 0002.
    dependencies = [("reviewers", "0001_initial"), ("audit", "0002_append_only_triggers")]

    # Irreversible on purpose, as audit's: dropping the protection is a decision for a DBA.
    operations = [
        migrations.RunPython(frozen_sql.run(__file__), migrations.RunPython.noop),
    ]

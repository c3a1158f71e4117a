"""A reviewer's verification and sign-off are evidence too: append-only in the database."""

from django.db import migrations

from audit import frozen_sql


class Migration(migrations.Migration):
    dependencies = [("reviewers", "0002_custody_append_only"), ("audit", "0007_format_v2")]

    operations = [
        migrations.RunPython(frozen_sql.run(__file__), migrations.RunPython.noop),
    ]

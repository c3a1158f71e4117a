"""A reviewer's verification and sign-off are evidence too: append-only in the database."""

from django.db import migrations

from audit.triggers import append_only


class Migration(migrations.Migration):
    dependencies = [("reviewers", "0002_custody_append_only"), ("audit", "0007_format_v2")]

    operations = [
        migrations.RunPython(append_only("reviewers_trailverification"), migrations.RunPython.noop),
        migrations.RunPython(append_only("reviewers_signoff"), migrations.RunPython.noop),
    ]

from django.db import migrations

from audit.triggers import append_only


class Migration(migrations.Migration):
    dependencies = [("audit", "0003_checkpoint")]

    operations = [
        migrations.RunPython(append_only("audit_checkpoint"), migrations.RunPython.noop),
    ]

from django.db import migrations

from audit.triggers import install


class Migration(migrations.Migration):
    dependencies = [("audit", "0001_initial")]

    # Irreversible on purpose: dropping the protection is a decision for a DBA, not a rollback.
    operations = [migrations.RunPython(install, migrations.RunPython.noop, elidable=False)]

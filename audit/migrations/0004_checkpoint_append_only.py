from django.db import migrations

from audit import frozen_sql


class Migration(migrations.Migration):
    dependencies = [("audit", "0003_checkpoint")]

    operations = [
        migrations.RunPython(frozen_sql.run(__file__), migrations.RunPython.noop),
    ]

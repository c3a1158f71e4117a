"""A lease's ask to run once more (audit.locks.run_coalesced): a wake-up that arrives while the
work runs is kept, not dropped."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("audit", "0012_record_openings")]

    operations = [
        migrations.AddField(
            model_name="tasklock",
            name="asked_again",
            field=models.BooleanField(default=False),
        ),
    ]

"""The feeder's place in a batch (Batch.sent_through_line), so a feed reads the next lines by
the (batch, line) index instead of passing over every line already sent."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("decoding", "0018_batches")]

    operations = [
        migrations.AddField(
            model_name="batch",
            name="sent_through_line",
            field=models.PositiveIntegerField(default=0),
        ),
    ]

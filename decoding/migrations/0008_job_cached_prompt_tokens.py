from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("decoding", "0007_remote_provider"),
    ]

    operations = [
        migrations.AddField(
            model_name="generationjob",
            name="cached_prompt_tokens",
            field=models.PositiveIntegerField(blank=True, null=True),
        ),
    ]

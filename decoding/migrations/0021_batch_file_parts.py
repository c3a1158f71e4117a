"""Batch files kept in parts (decoding.batch_files): each file's bytes move into BatchFileParts
of 1 MiB, in order, and the one-value `content` column goes."""

import django.db.models.deletion
from django.db import migrations, models

PART_BYTES = 1 << 20


def into_parts(apps, schema_editor):
    BatchFile = apps.get_model("decoding", "BatchFile")
    BatchFilePart = apps.get_model("decoding", "BatchFilePart")
    for file_id in BatchFile.objects.values_list("pk", flat=True).iterator():
        content = bytes(BatchFile.objects.values_list("content", flat=True).get(pk=file_id))
        BatchFilePart.objects.bulk_create(
            BatchFilePart(file_id=file_id, index=index, data=content[start : start + PART_BYTES])
            for index, start in enumerate(range(0, len(content), PART_BYTES))
        )


def into_content(apps, schema_editor):
    BatchFile = apps.get_model("decoding", "BatchFile")
    BatchFilePart = apps.get_model("decoding", "BatchFilePart")
    for stored in BatchFile.objects.all().iterator():
        parts = BatchFilePart.objects.filter(file=stored).order_by("index")
        stored.content = b"".join(bytes(data) for data in parts.values_list("data", flat=True))
        stored.save(update_fields=["content"])


class Migration(migrations.Migration):
    dependencies = [("decoding", "0020_job_failure_model_unavailable")]

    operations = [
        migrations.CreateModel(
            name="BatchFilePart",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("index", models.PositiveIntegerField()),
                ("data", models.BinaryField()),
                (
                    "file",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="parts",
                        to="decoding.batchfile",
                    ),
                ),
            ],
            options={
                "constraints": [
                    models.UniqueConstraint(
                        fields=("file", "index"), name="decoding_batchfilepart_index"
                    )
                ]
            },
        ),
        # Nullable first, so that going back adds the column empty, fills it, then requires it.
        migrations.AlterField(
            model_name="batchfile", name="content", field=models.BinaryField(null=True)
        ),
        migrations.RunPython(into_parts, into_content),
        migrations.RemoveField(model_name="batchfile", name="content"),
    ]

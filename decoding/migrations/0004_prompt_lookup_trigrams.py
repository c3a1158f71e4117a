"""The default spec drafts on 3-gram matches only (it matched 1- to 3-grams).

Measured in bench/results: a match on one or two tokens proposes drafts that open-ended text
rejects, and each rejected draft costs a wider verify pass; trigrams keep the drafts that
extraction accepts. A spec whose settings an operator already changed is left alone.
"""

from django.db import migrations

NAME = "smollm2-135m-instruct"
OLD = {"min_ngram": 1, "max_ngram": 3}
NEW = {"min_ngram": 3, "max_ngram": 3}


def _move(apps, frm, to):
    ModelSpec = apps.get_model("decoding", "ModelSpec")
    spec = ModelSpec.objects.filter(name=NAME).first()
    if spec is not None and spec.drafter_settings == frm:
        spec.drafter_settings = to
        spec.save(update_fields=["drafter_settings", "updated_at"])


class Migration(migrations.Migration):
    dependencies = [("decoding", "0003_replay")]

    operations = [
        migrations.RunPython(
            lambda apps, schema_editor: _move(apps, OLD, NEW),
            lambda apps, schema_editor: _move(apps, NEW, OLD),
        )
    ]

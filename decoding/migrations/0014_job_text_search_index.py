"""English full-text search over each job's rendered prompt and served answer, for the reviewer
portal's search (reviewers.search). PostgreSQL only, and outside the Django model: a stored
generated tsvector column, kept by the database on every write, and a GIN index over it. Stored,
so that a page of a common word's matches, read newest first, tests each row's vector instead of
parsing its texts again. The embedded default's SQLite searches by scanning."""

from django.db import migrations

COLUMN, INDEX = "text_search", "decoding_job_text_search"
CREATE = [
    f"ALTER TABLE decoding_generationjob ADD COLUMN IF NOT EXISTS {COLUMN} tsvector "
    "GENERATED ALWAYS AS (to_tsvector('english'::regconfig, prompt_text || ' ' || output_text)) "
    "STORED",
    f"CREATE INDEX IF NOT EXISTS {INDEX} ON decoding_generationjob USING gin ({COLUMN})",
]
DROP = [
    f"DROP INDEX IF EXISTS {INDEX}",
    f"ALTER TABLE decoding_generationjob DROP COLUMN IF EXISTS {COLUMN}",
]


def _run(statements):
    def run(apps, schema_editor):
        if schema_editor.connection.vendor == "postgresql":
            for statement in statements:
                schema_editor.execute(statement)

    return run


class Migration(migrations.Migration):
    dependencies = [("decoding", "0013_spec_default_params_source")]

    operations = [migrations.RunPython(_run(CREATE), _run(DROP))]

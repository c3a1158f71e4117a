"""A migration's frozen SQL: the statements it executes, kept in files beside it
(`<migration>.<vendor>.sql`, statements apart on `-- statement` lines), so replaying an old
migration on a new database runs what it ran when it was written, never today's code.

The append-only triggers and the chain checks (docs/architecture.md, invariant 6) are made this way.
"""

from __future__ import annotations

from pathlib import Path

SEPARATOR = "\n-- statement\n"


def statements(migration_file: str, vendor: str) -> list[str]:
    """The frozen statements of the migration in `migration_file` for a database `vendor`."""
    base = Path(migration_file).with_suffix("")
    path = base.with_name(f"{base.name}.{vendor}.sql")
    if not path.exists():
        raise NotImplementedError(f"{base.name} has no frozen SQL for database vendor {vendor!r}")
    return [s for s in path.read_text("utf-8").split(SEPARATOR) if s.strip()]


def run(migration_file: str):
    """A RunPython function executing the migration's frozen statements, in order."""

    def execute(apps, schema_editor) -> None:
        for statement in statements(migration_file, schema_editor.connection.vendor):
            schema_editor.execute(statement, params=None)  # no placeholders: keep % literal

    return execute

"""Migrations that make tables append-only run frozen SQL files, never today's code: each has a
file per supported database, and each file parses into the statements it runs.
(tests/integration/test_append_only_triggers.py checks what those statements do on PostgreSQL.)"""

from pathlib import Path

import pytest

from audit import frozen_sql

ROOT = Path(__file__).parents[2]
FROZEN = sorted(
    path
    for app in ("audit", "decoding", "reviewers")
    for path in (ROOT / app / "migrations").glob("0*.py")
    if "frozen_sql.run(__file__)" in path.read_text()
)


def test_the_append_only_migrations_are_frozen():
    names = {f"{p.parent.parent.name}/{p.stem}" for p in FROZEN}
    assert {
        "audit/0002_append_only_triggers",
        "audit/0004_checkpoint_append_only",
        "audit/0009_log_tiles",
        "audit/0011_matter_keys",
        "reviewers/0002_custody_append_only",
        "reviewers/0003_verdicts_append_only",
        "reviewers/0004_custody_pending_and_points",
    } <= names


@pytest.mark.parametrize("migration", FROZEN, ids=lambda p: f"{p.parent.parent.name}/{p.stem}")
@pytest.mark.parametrize("vendor", ["postgresql", "sqlite"])
def test_each_frozen_migration_has_its_statements_for_each_database(migration, vendor):
    statements = frozen_sql.statements(str(migration), vendor)
    assert statements and all("CREATE" in s or "ALTER" in s for s in statements)


def test_an_unsupported_database_is_named():
    with pytest.raises(NotImplementedError, match="mysql"):
        frozen_sql.statements(str(FROZEN[0]), "mysql")

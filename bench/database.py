"""The benchmarks' PostgreSQL: a database of their own, migrated (triggers included) before
anything is timed, so the audit's cost is measured against the real store."""

from __future__ import annotations

import os


def setup_database(url: str, fresh: bool) -> dict:
    """Create (or recreate) the bench database, point Django at it, migrate."""
    import dj_database_url
    import psycopg

    config = dj_database_url.parse(url)
    name = config["NAME"]
    admin = psycopg.connect(
        host=config["HOST"] or "127.0.0.1",
        port=config["PORT"] or 5432,
        user=config["USER"] or "postgres",
        password=config["PASSWORD"] or None,
        dbname="postgres",
        autocommit=True,
    )
    with admin:
        exists = admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone()
        if exists and fresh:
            admin.execute(f'DROP DATABASE "{name}"')
            exists = None
        if not exists:
            admin.execute(f'CREATE DATABASE "{name}"')
        settings = {
            key: admin.execute(f"SHOW {key}").fetchone()[0]
            for key in ("server_version", "fsync", "synchronous_commit", "wal_sync_method")
        }
    os.environ["DATABASE_URL"] = url
    os.environ["DJANGO_SETTINGS_MODULE"] = "pathfinder_site.settings"
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0, interactive=False)
    settings["database"] = name
    return settings

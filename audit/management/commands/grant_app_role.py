"""Give the application's database role what it needs and no more (PostgreSQL).

Run it as the tables' owner after `migrate`. The role may read and write the application's
tables, but on the audit tables it may only read and insert (plus update a trail's head and seal,
and the periodic-task locks); no UPDATE or DELETE of records, ledger entries, verification runs,
checkpoints, erasures, custody events, verifications or sign-offs, and no TRUNCATE anywhere. A
destruction under an order (reviewers.destruction) blanks a record's openings: the role may
update that one column, and the trigger lets it only for a trail with an erasure recorded.
It may not create TEMP tables either (revoked from PUBLIC on the database), so nothing can shadow
the tables the triggers read. The triggers stay the second line.
"""

from django.core.management.base import BaseCommand, CommandError
from django.db import connection
from psycopg import sql

# Append-only for the application: SELECT and INSERT only.
APPEND_ONLY = [
    "audit_decisionrecord",
    "audit_ledgerentry",
    "audit_verificationrun",
    "audit_checkpoint",
    "audit_logtile",
    "audit_erasure",
    "reviewers_custodyevent",
    "reviewers_custodypoint",
    "reviewers_trailverification",
    "reviewers_signoff",
]
# Updated in place through the service layer, never deleted.
NO_DELETE = ["audit_trail", "audit_tasklock"]


class Command(BaseCommand):
    help = "Grant an application role least privilege on Pathfinder's tables (PostgreSQL)."

    def add_arguments(self, parser):
        parser.add_argument("role", help="an existing login role the web and workers use")

    def handle(self, *args, **options):
        if connection.vendor != "postgresql":
            raise CommandError("roles and grants are PostgreSQL's; SQLite has none")
        role = sql.Identifier(options["role"])
        database = sql.Identifier(connection.settings_dict["NAME"])
        tables = connection.introspection.table_names()
        missing = [t for t in APPEND_ONLY + NO_DELETE if t not in tables]
        if missing:
            raise CommandError(f"run migrate first; missing tables: {', '.join(missing)}")
        statements = [
            sql.SQL("GRANT USAGE ON SCHEMA public TO {}").format(role),
            sql.SQL(
                "GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO {}"
            ).format(role),
            sql.SQL("GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public TO {}").format(role),
            sql.SQL(
                "REVOKE TRUNCATE, REFERENCES, TRIGGER ON ALL TABLES IN SCHEMA public FROM {}"
            ).format(role),
            sql.SQL("REVOKE UPDATE, DELETE ON {} FROM {}").format(
                sql.SQL(", ").join(map(sql.Identifier, APPEND_ONLY)), role
            ),
            sql.SQL("REVOKE DELETE ON {} FROM {}").format(
                sql.SQL(", ").join(map(sql.Identifier, NO_DELETE)), role
            ),
            sql.SQL("GRANT UPDATE (openings) ON audit_decisionrecord TO {}").format(role),
            # Every role gets TEMP through PUBLIC by default; a TEMP table named like an audit
            # table would be found first by anything that does not pin its search_path.
            sql.SQL("REVOKE TEMPORARY ON DATABASE {} FROM PUBLIC").format(database),
            sql.SQL("REVOKE TEMPORARY ON DATABASE {} FROM {}").format(database, role),
        ]
        with connection.cursor() as cursor:
            for statement in statements:
                cursor.execute(statement)
        self.stdout.write(
            f"Granted {options['role']}: read/write on application tables; SELECT and INSERT "
            f"only on {', '.join(APPEND_ONLY)} (and UPDATE of audit_decisionrecord.openings, "
            f"for a recorded destruction); no DELETE on {', '.join(NO_DELETE)}; no TEMP tables."
        )

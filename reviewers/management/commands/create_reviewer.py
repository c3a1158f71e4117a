import getpass
import os
import sys

from django.core.management.base import BaseCommand, CommandError

from reviewers.services import reviewer_upsert

PASSWORD_VARIABLE = "PATHFINDER_REVIEWER_PASSWORD"


class Command(BaseCommand):
    help = (
        "Create or update a reviewer and grant matters (creating missing matters). Repeat "
        "--matter for several; run again to add matters or change the password. The password "
        f"comes from ${PASSWORD_VARIABLE}, else a prompt on a terminal (never the command line, "
        "which other users see in `ps`)."
    )

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument(
            "--password",
            help=f"deprecated: visible in `ps` and shell history; use ${PASSWORD_VARIABLE}",
        )
        parser.add_argument(
            "--matter",
            action="append",
            default=[],
            help="a matter (legal case) to grant; repeatable",
        )

    def handle(self, *args, **options):
        if not options["username"].strip():
            raise CommandError("username must not be empty")
        matters = [name.strip() for name in options["matter"]]
        if any(not name for name in matters):
            raise CommandError("--matter must not be empty")
        password = self._password(options["password"])
        user, created, granted = reviewer_upsert(
            username=options["username"], password=password, matter_names=matters
        )
        self.stdout.write(f"{'Created' if created else 'Updated'} reviewer {user.username!r}.")
        if created and not password:
            self.stdout.write(
                f"No password given (${PASSWORD_VARIABLE} or a terminal): the reviewer cannot "
                "log in until one is set."
            )
        for matter in granted:
            self.stdout.write(f"Granted matter {matter.name!r}.")

    def _password(self, given: str | None) -> str | None:
        if given:
            self.stderr.write(
                f"warning: --password is visible to other users (ps, shell history); set "
                f"${PASSWORD_VARIABLE} instead."
            )
            return given
        if os.environ.get(PASSWORD_VARIABLE):
            return os.environ[PASSWORD_VARIABLE]
        if not sys.stdin.isatty():
            return None
        first = getpass.getpass("Password (empty: none): ")
        if first and getpass.getpass("Password again: ") != first:
            raise CommandError("the two passwords differ; nothing was changed")
        return first or None

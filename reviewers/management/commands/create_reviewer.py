from django.core.management.base import BaseCommand, CommandError

from reviewers.services import reviewer_upsert


class Command(BaseCommand):
    help = (
        "Create or update a reviewer and grant matters (creating missing matters). Repeat "
        "--matter for several; run again to add matters or change the password."
    )

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("--password", help="set (or change) the reviewer's password")
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
        user, created, granted = reviewer_upsert(
            username=options["username"], password=options["password"], matter_names=matters
        )
        self.stdout.write(f"{'Created' if created else 'Updated'} reviewer {user.username!r}.")
        if created and not options["password"]:
            self.stdout.write("No --password given: the reviewer cannot log in until one is set.")
        for matter in granted:
            self.stdout.write(f"Granted matter {matter.name!r}.")

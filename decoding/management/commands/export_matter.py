"""manage.py export_matter: one bundle of every sealed trail of a matter (or of a date range)."""

import datetime

from django.core.management.base import BaseCommand, CommandError

from audit.export import ExportError
from decoding.models import Matter
from decoding.services import matter_bundle_export


def _day(text: str) -> datetime.date:
    try:
        return datetime.date.fromisoformat(text)
    except ValueError as exc:
        raise CommandError(f"{text!r} is not a date (YYYY-MM-DD)") from exc


class Command(BaseCommand):
    help = (
        "Write one bundle of every sealed trail (every attempt) of a matter's jobs, optionally "
        "only those submitted from --since to --until (UTC days, inclusive), with one manifest, "
        "one cosigned checkpoint and an inclusion proof per trail."
    )

    def add_arguments(self, parser):
        parser.add_argument("--matter", required=True, help="the matter's name")
        parser.add_argument("--since", type=_day, help="first day (YYYY-MM-DD, UTC) of jobs")
        parser.add_argument("--until", type=_day, help="last day (YYYY-MM-DD, UTC) of jobs")
        parser.add_argument("--out", required=True, help="the zip file to write")

    def handle(self, *args, **options):
        matter = Matter.objects.filter(name=options["matter"]).first()
        if matter is None:
            raise CommandError(f"matter: no matter named {options['matter']!r}")
        try:
            export = matter_bundle_export(
                matter=matter, since=options["since"], until=options["until"], out=options["out"]
            )
        except ExportError as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(
            f"Wrote {len(export.trail_ids)} trail(s) of matter {matter.name!r} to {export.path} "
            f"(SHA-256 {export.sha256}), proven by the checkpoint of {export.tree_size} trails."
        )
        if export.left_out:
            self.stdout.write(f"{export.left_out} trail(s) left out: matter.json says why.")
        self.stdout.write(
            f"Check it offline: python -m audit.offline_verify {export.path} --key '<the log's "
            "verifier key, from manage.py verifier_key>'"
        )

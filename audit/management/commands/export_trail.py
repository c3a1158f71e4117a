import uuid

from django.core.management.base import BaseCommand, CommandError

from audit.export import WITHHOLDABLE, ExportError, trail_export
from audit.models import Trail


class Command(BaseCommand):
    help = "Write the evidence bundle (a zip) of a job's latest trail, or of a given trail."

    def add_arguments(self, parser):
        scope = parser.add_mutually_exclusive_group(required=True)
        scope.add_argument("--job", type=uuid.UUID)
        scope.add_argument("--trail", type=uuid.UUID)
        parser.add_argument("--out", required=True, help="the zip file to write")
        parser.add_argument(
            "--withhold",
            action="append",
            choices=sorted(WITHHOLDABLE),
            default=[],
            help="leave this text out (the bundle says so, and still verifies); repeatable",
        )

    def handle(self, *args, **options):
        trail_id = options["trail"]
        if options["job"]:
            trail = Trail.objects.filter(job_id=options["job"]).order_by("-attempt").first()
            if trail is None:
                raise CommandError(f"job {options['job']} has no audit trail")
            trail_id = trail.id
        try:
            path = trail_export(trail_id=trail_id, out=options["out"], withhold=options["withhold"])
        except ExportError as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(f"Wrote the evidence bundle of trail {trail_id} to {path}.")
        self.stdout.write(
            f"Check it offline: python -m audit.offline_verify {path} --key '<the log's "
            "verifier key, from manage.py verifier_key>'"
        )

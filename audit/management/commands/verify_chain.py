"""manage.py verify_chain: check the audit store's integrity from the command line.

Exit status 0 when everything checked is intact, 1 when any link is broken.
"""

import json
import sys
import uuid

from django.core.management.base import BaseCommand, CommandError
from tqdm import tqdm

from audit.models import Trail
from audit.verification import verify_everything, verify_trails


class Command(BaseCommand):
    help = "Verify audit trails and the global ledger; name every broken link."

    def add_arguments(self, parser):
        scope = parser.add_mutually_exclusive_group(required=True)
        scope.add_argument("--job", type=uuid.UUID, help="every trail (attempt) of one job")
        scope.add_argument("--trail", type=uuid.UUID, help="one trail")
        scope.add_argument("--all", action="store_true", help="every trail and the ledger")
        parser.add_argument(
            "--full",
            action="store_true",
            help="with --all: walk every record, not only what changed since the last verified "
            "point",
        )
        parser.add_argument("--json", action="store_true", help="print the report as JSON")

    def handle(self, *args, **options):
        if options["all"]:
            report = self._verify_all(show_progress=not options["json"], full=options["full"])
        elif options["trail"]:
            report = verify_trails([options["trail"]], scope=f"trail {options['trail']}")
        else:
            job_id = options["job"]
            trail_ids = list(
                Trail.objects.filter(job_id=job_id).order_by("attempt").values_list("id", flat=True)
            )
            if not trail_ids:
                raise CommandError(f"job {job_id} has no audit trail")
            report = verify_trails(trail_ids, scope=f"job {job_id}")

        if options["json"]:
            self.stdout.write(json.dumps(report.as_dict(), indent=2))
        else:
            self._print_summary(report)
        if not report.ok:
            sys.exit(1)

    def _verify_all(self, *, show_progress: bool, full: bool):
        enabled = show_progress and sys.stderr.isatty()
        total = Trail.objects.count() if enabled else None
        with tqdm(total=total, unit="trail", disable=not enabled, file=sys.stderr) as bar:
            return verify_everything(progress=lambda: bar.update(1), full=full)

    def _print_summary(self, report):
        summary, verdict, *details = report.lines()
        self.stdout.write(summary)
        style = self.style.SUCCESS if report.ok else self.style.ERROR
        self.stdout.write(style(verdict))
        for line in details:
            self.stdout.write(line)

"""manage.py destroy MATTER --order TEXT [--job ID ...]: destroy the content of a matter's jobs
under an order, with the proofs kept (reviewers.destruction)."""

from django.core.management.base import BaseCommand, CommandError

from reviewers.destruction import destroy
from reviewers.records import RecordsRefusal, acting_user, where_run


class Command(BaseCommand):
    help = (
        "Destroy the texts of a matter's finished jobs (or of the named ones) under an order: "
        "prompts and answers, token openings and salts, Batch API files, what workers cached. "
        "Records, commitments, digests and leaves stay, so every proof still verifies. Refused, "
        "changing nothing, while the matter is under a legal hold."
    )

    def add_arguments(self, parser):
        parser.add_argument("matter", help="the matter's name")
        parser.add_argument("--order", required=True, help="the order it is destroyed under")
        parser.add_argument(
            "--job", action="append", dest="jobs", metavar="ID", help="only this job (repeat)"
        )
        parser.add_argument(
            "--by", help="the user to record it under (default: the service account)"
        )

    def handle(self, *args, **options):
        try:
            result = destroy(
                matter_name=options["matter"],
                order=options["order"],
                user=acting_user(options["by"]),
                job_ids=options["jobs"],
                run_by=where_run(),
            )
        except RecordsRefusal as exc:
            raise CommandError(str(exc)) from exc
        for job in result.already:
            self.stdout.write(f"job {job} was destroyed before: left as it is")
        if result.event_seq is None:
            self.stdout.write(f"Nothing of matter {result.matter!r} left to destroy.")
            return
        self.stdout.write(
            f"Destroyed the texts of {len(result.jobs)} job(s) and {len(result.files)} file(s) "
            f"of matter {result.matter!r} under {result.order!r}; {len(result.trails)} trail(s) "
            f"keep their records and proofs. Custody event {result.event_seq}."
        )
        if result.tokens_kept:
            self.stdout.write(
                f"{len(result.tokens_kept)} trail(s) of audit format 1 or 2 keep their tokens "
                "in the clear in hashed records, which cannot change without breaking the "
                "chain: " + ", ".join(result.tokens_kept)
            )
        workers = result.workers
        self.stdout.write(
            "Workers: could not be asked now; each forgets the matter before its next job of it."
            if workers is None
            else f"Workers: {workers} confirmed they forgot the matter's cached state."
        )

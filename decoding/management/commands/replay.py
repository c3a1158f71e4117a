"""Replay finished jobs alone, in this process, and compare every decision with its trail.

    manage.py replay JOB_ID [JOB_ID ...]

Prints, per job, `identical` or the first differing step and field (both values); exits 0 only
when every job replays identical. The portal's Replay does the same through a worker.
"""

from __future__ import annotations

import uuid

from django.core.management.base import BaseCommand, CommandError

from decoding.models import GenerationJob
from decoding.services import replayable
from decoding.worker.replay import replay_decisions


class Command(BaseCommand):
    help = "Replay finished jobs in this process; exit 0 only when every one is identical."

    def add_arguments(self, parser):
        parser.add_argument("job_ids", nargs="+", metavar="JOB_ID")

    def handle(self, *args, job_ids, **options):
        differing = 0
        for given in job_ids:
            identical, verdict = self._verdict(given)
            differing += not identical
            self.stdout.write(f"{given}: {verdict}")
        if differing:
            raise CommandError(f"{differing} of {len(job_ids)} jobs did not replay identical")

    def _verdict(self, given: str) -> tuple[bool, str]:
        try:
            job = GenerationJob.objects.select_related("model_spec").get(pk=uuid.UUID(given))
        except (ValueError, GenerationJob.DoesNotExist):
            return False, "no such job"
        if job.destroyed_at is not None:
            return False, (
                f"not replayable: its texts were destroyed on {job.destroyed_at:%Y-%m-%d} "
                f"under {job.destroyed_under!r}"
            )
        if not replayable(job):
            trail = "a trail" if job.trail_id else "no trail"
            return False, f"not replayable: the job is {job.status} and has {trail}"
        steps, first = replay_decisions(job=job)
        if first is None:
            return True, f"identical ({len(steps)} steps)"
        return False, (
            f"differs at step {first['step']}, field {first['field']}: "
            f"recorded {first['recorded']}, replayed {first['replayed']}"
        )

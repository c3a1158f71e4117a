"""Celery tasks: thin wrappers that take ids and call a service."""

import uuid

from celery import shared_task
from django.conf import settings

from audit.locks import run_coalesced, run_exclusively
from decoding.batches import ADVANCE_BATCHES, batches_advance, job_ended
from decoding.delivery import REPLAY_JOB, RUN_GENERATION
from decoding.services import jobs_recover, trails_seal_orphaned
from decoding.worker.execution import TryLater, job_run
from decoding.worker.replay import replay_run, replays_fail_lost


@shared_task(name=RUN_GENERATION, bind=True, max_retries=None)
def run_generation(self, job_id: str) -> None:
    try:
        job_run(job_id=uuid.UUID(job_id))
        job_ended(job_id)
    except TryLater as later:
        # Another attempt may still be decoding it (a redelivered message): look again once its
        # lease could have lapsed; if its worker died, this delivery starts the next attempt.
        # Or the worker's last slot is kept for another matter: the queue hands it that job.
        raise self.retry(countdown=later.retry_in + 1) from later


def recovery_sweep() -> dict:
    """Beat's periodic recovery: lost jobs handed back to the queue, trails their attempts
    left open sealed, replays whose worker died failed."""
    return {
        "requeued": jobs_recover(),
        "trails_sealed": trails_seal_orphaned(),
        "replays_failed": replays_fail_lost(),
    }


@shared_task(name="decoding.recover_jobs")
def recover_jobs() -> dict | None:
    return run_exclusively(
        "decoding.recover_jobs", settings.PATHFINDER_RECOVERY_INTERVAL_S, recovery_sweep
    )


@shared_task(name=REPLAY_JOB)
def replay_job(replay_id: str) -> None:
    replay_run(replay_id=uuid.UUID(replay_id))


@shared_task(name=ADVANCE_BATCHES)
def advance_batches() -> dict | None:
    """Beat's, and a kick's: batches' lines made into jobs and fed to the queue, ended batches
    closed with their files (decoding.batches)."""
    return run_coalesced(ADVANCE_BATCHES, 60, batches_advance)

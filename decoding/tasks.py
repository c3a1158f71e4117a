"""Celery tasks: thin wrappers that take ids and call a service."""

import uuid

from celery import shared_task

from decoding.replay import replay_run
from decoding.services import job_run


@shared_task(name="decoding.run_generation")
def run_generation(job_id: str) -> None:
    job_run(job_id=uuid.UUID(job_id))


@shared_task(name="decoding.replay_job")
def replay_job(replay_id: str) -> None:
    replay_run(replay_id=uuid.UUID(replay_id))

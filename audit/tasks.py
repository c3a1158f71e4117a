"""Periodic audit work, run by Celery beat."""

from celery import shared_task

from audit.log import checkpoint_create


@shared_task(name="audit.create_checkpoint")
def create_checkpoint() -> int:
    return checkpoint_create().tree_size

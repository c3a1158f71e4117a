"""Periodic custody and records work, run by Celery beat."""

import logging

from celery import shared_task
from django.conf import settings

from audit.locks import run_exclusively

from .custody_chain import custody_chain_pending, custody_verify
from .destruction import destroy_expired

logger = logging.getLogger(__name__)


@shared_task(name="reviewers.chain_pending_views")
def chain_pending_views() -> int:
    """Chain page views no request got to chain (their chain was busy)."""
    return custody_chain_pending()


@shared_task(name="reviewers.verify_custody")
def verify_custody() -> bool | None:
    """Walk the whole custody chain from its start (the page checks only what is new)."""
    result = run_exclusively(
        "reviewers.verify_custody",
        settings.PATHFINDER_VERIFY_INTERVAL_S,
        lambda: custody_verify(from_start=True)[0],
    )
    if result is None:
        return None
    if not result.ok:
        logger.error(
            "the custody chain is broken",
            extra={"failures": len(result.failures), "first": str(result.first_failure)},
        )
    return result.ok


@shared_task(name="reviewers.destroy_expired")
def destroy_expired_content() -> int | None:
    """Retention: destroy the content of jobs older than their matter's retention period, in
    matters no legal hold covers (reviewers.destruction); how many jobs."""
    done = run_exclusively(
        "reviewers.destroy_expired", settings.PATHFINDER_RETENTION_INTERVAL_S, destroy_expired
    )
    if done is None:
        return None
    for destruction in done:
        logger.info(
            "retention destroyed content",
            extra={"matter": destruction.matter, "jobs": len(destruction.jobs)},
        )
    return sum(len(destruction.jobs) for destruction in done)

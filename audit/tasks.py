"""Periodic audit work, run by Celery beat; each under a lock, so only one runs at a time."""

import logging

from celery import shared_task
from django.conf import settings

from audit.keys import SigningKeyMissing
from audit.locks import run_exclusively
from audit.log import LogInconsistent, checkpoint_create
from audit.metrics import VERIFICATION_FAILURES
from audit.publish import PublishConflict
from audit.verification import verify_everything

logger = logging.getLogger(__name__)


@shared_task(name="audit.create_checkpoint")
def create_checkpoint() -> int | None:
    try:
        checkpoint = run_exclusively(
            "audit.create_checkpoint", settings.PATHFINDER_CHECKPOINT_INTERVAL_S, checkpoint_create
        )
    except (SigningKeyMissing, PublishConflict, LogInconsistent) as exc:
        # Fail closed and say why, every interval, until an operator acts (docs/operations.md).
        logger.error("no checkpoint signed", extra={"error": str(exc)})
        return None
    if checkpoint is None:
        logger.info("checkpoint skipped: another runner holds the lock")
        return None
    return checkpoint.tree_size


@shared_task(name="audit.verify_all")
def verify_all() -> bool | None:
    """Verify every trail, the ledger and the checkpoints; the run is recorded either way."""
    report = run_exclusively(
        "audit.verify_all", settings.PATHFINDER_VERIFY_INTERVAL_S, verify_everything
    )
    if report is None:
        logger.info("verification skipped: another runner holds the lock")
        return None
    if not report.ok:
        VERIFICATION_FAILURES.inc(len(report.failures))
        logger.error(
            "periodic verification found broken links",
            extra={"failures": len(report.failures), "first": str(report.failures[0])},
        )
    return report.ok

"""Destroying a matter's content under an order, with the proofs kept (docs/adr/0029).

One transaction, under the matter row's lock (the one a legal hold takes): refuse while a hold
is on, and change nothing then; else destroy what decoding keeps of the jobs
(decoding.destruction), erase their trails' salts and openings (audit.erasure), and write the
destruction event in the custody log. After the commit the workers are told to forget the
matter's cached state (decoding.worker.forgetting) and PostgreSQL is asked to vacuum the
tables whose old row versions still hold the texts.

Retention (`destroy_expired`, run by beat) is the same destruction, under the rule's own
order text, for each matter whose retention period has passed and which no hold covers.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Collection
from dataclasses import dataclass, field
from datetime import timedelta

from django.db import connection, transaction
from django.utils import timezone

from audit.erasure import erase_trails
from decoding import destruction as decoding_content
from decoding.models import GenerationJob, Matter

from .custody_chain import custody_append
from .models import CustodyEvent
from .records import RecordsRefusal, acting_user, locked_matter

logger = logging.getLogger(__name__)

# The tables whose old row versions hold destroyed texts until vacuumed.
_VACUUMED = (
    "decoding_generationjob",
    "decoding_replay",
    "decoding_batchline",
    "decoding_batch",
    "decoding_batchfilepart",
    "audit_trail",
    "audit_decisionrecord",
)


@dataclass
class Destruction:
    matter: str
    order: str
    jobs: list[str] = field(default_factory=list)
    trails: list[str] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    tokens_kept: list[str] = field(default_factory=list)
    already: list[str] = field(default_factory=list)  # named, and destroyed before
    event_seq: int | None = None
    workers: int | None = None  # workers that confirmed they forgot (None: not asked)


def destroy(
    *,
    matter_name: str,
    order: str,
    user,
    job_ids: Collection[str] | None = None,
    run_by: str = "",
) -> Destruction:
    """Destroy the content of the matter's finished jobs (or of the named ones)."""
    order = order.strip()
    if not order:
        raise RecordsRefusal("order: name the order (or rule) the content is destroyed under")
    with transaction.atomic():
        matter = locked_matter(matter_name)
        if matter.on_hold:
            raise RecordsRefusal(
                f"matter {matter.name!r} is under a legal hold since "
                f"{matter.hold_since:%Y-%m-%d %H:%M} UTC ({matter.hold_reason}): nothing was "
                f"destroyed. Release it first (manage.py legal_hold {matter.name} --off)."
            )
        result = Destruction(matter=matter.name, order=order)
        jobs = GenerationJob.objects.filter(matter=matter)
        if job_ids is not None:
            jobs = jobs.filter(pk__in=_named(matter, job_ids))
            result.already = sorted(
                str(pk)
                for pk in jobs.filter(destroyed_at__isnull=False).values_list("pk", flat=True)
            )
        jobs = jobs.filter(destroyed_at__isnull=True)
        busy = decoding_content.unfinished(jobs)
        if busy:
            raise RecordsRefusal(
                f"job: {len(busy)} job(s) of matter {matter.name!r} still run or wait "
                f"({', '.join(busy[:5])}{', …' if len(busy) > 5 else ''}): cancel them or let "
                "them finish; nothing was destroyed"
            )
        at = timezone.now()
        whole = matter.pk if job_ids is None else None
        erased = decoding_content.erase_jobs(jobs, at=at, order=order, whole_matter_id=whole)
        if not erased.jobs and not erased.files:
            return result
        trails = erase_trails(
            erased.jobs, matter=matter.name, order=order, by=user.get_username(), at=at
        )
        Matter.objects.filter(pk=matter.pk).update(destructions=matter.destructions + 1)
        result.jobs, result.files = erased.jobs, erased.files
        result.trails, result.tokens_kept = trails.trail_ids, trails.tokens_kept
        event = custody_append(
            user=user,
            action=CustodyEvent.Action.DESTROY,
            detail={
                "matter": matter.name,
                "order": order,
                "jobs": erased.jobs,
                "trails": trails.trail_ids,
                "files": erased.files,
                "replays": erased.replays,
                "batch_lines": erased.batch_lines,
                "tokens_kept_in_records": trails.tokens_kept,
                "run_by": run_by,
            },
        )
        result.event_seq = event.seq
        transaction.on_commit(lambda: _after_commit(matter.pk, result))
    return result


def _named(matter: Matter, job_ids: Collection[str]) -> list[str]:
    """The named jobs, each checked to be a job of the matter."""
    ids = []
    for text in job_ids:
        try:
            ids.append(str(uuid.UUID(str(text))))
        except ValueError as exc:
            raise RecordsRefusal(f"job: {text!r} is not a job id") from exc
    found = {
        str(pk)
        for pk in GenerationJob.objects.filter(matter=matter, pk__in=ids).values_list(
            "pk", flat=True
        )
    }
    missing = [i for i in ids if i not in found]
    if missing:
        raise RecordsRefusal(f"job: no job {missing[0]} in matter {matter.name!r}")
    return ids


def _after_commit(matter_id: int, result: Destruction) -> None:
    result.workers = decoding_content.tell_workers(matter_id)
    vacuum()


def vacuum() -> None:
    """Have PostgreSQL reclaim the old row versions that still hold the destroyed texts (an
    UPDATE leaves them in the table and its indexes until then). Outside any transaction."""
    if connection.vendor != "postgresql" or connection.in_atomic_block:
        return
    with connection.cursor() as cursor:
        for table in _VACUUMED:
            try:
                cursor.execute(f"VACUUM {table}")
            except Exception as exc:  # autovacuum gets to it later; the docs say so
                logger.warning("vacuum failed", extra={"table": table, "error": str(exc)})


def destroy_expired(now=None) -> list[Destruction]:
    """Beat's retention: each matter with a retention period and no hold loses the content of
    its finished jobs submitted longer ago than the period."""
    now = now or timezone.now()
    done = []
    matters = Matter.objects.filter(retention_days__isnull=False, hold_since__isnull=True)
    for matter in matters:
        cutoff = now - timedelta(days=matter.retention_days)
        expired = GenerationJob.objects.filter(
            matter=matter,
            destroyed_at__isnull=True,
            created_at__lt=cutoff,
            status__in=GenerationJob.FINISHED,
        ).values_list("pk", flat=True)
        ids = [str(pk) for pk in expired[:1000]]  # the next run takes the rest
        if not ids:
            continue
        try:
            done.append(
                destroy(
                    matter_name=matter.name,
                    order=f"retention: {matter.retention_days} days after submission",
                    user=acting_user(),
                    job_ids=ids,
                    run_by="beat",
                )
            )
        except RecordsRefusal as exc:  # a hold placed meanwhile: it wins
            logger.info(
                "retention skipped a matter", extra={"matter": matter.name, "why": str(exc)}
            )
    return done

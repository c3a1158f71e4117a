"""Reads for the portal. Every lookup of a job, replay or custody event is scoped to the matters
granted to the reviewer: anything else is a 404, with no hint that it exists."""

from __future__ import annotations

import datetime
import uuid
from dataclasses import dataclass

from django.db.models import OuterRef, Q, QuerySet, Subquery
from django.shortcuts import get_object_or_404

from audit.models import Trail
from audit.selectors import trail_decision, trail_decisions
from decoding.models import GenerationJob, Matter, Replay
from decoding.selectors import job_decisions, start_of_day

from .models import Annotation, CustodyEvent, SignOff, TrailVerification
from .search import job_search
from .steps import Step, emitted_tokens, step_present

PAGE_SIZE = 50


def matter_list_for(*, user) -> QuerySet[Matter]:
    return Matter.objects.filter(grants__user=user).order_by("name")


def job_queryset_for(*, user) -> QuerySet[GenerationJob]:
    return GenerationJob.objects.filter(matter__grants__user=user)


def job_get_for(*, user, job_id: uuid.UUID) -> GenerationJob:
    return get_object_or_404(
        job_queryset_for(user=user).select_related("matter", "model_spec"), pk=job_id
    )


def replay_get_for(*, user, replay_id: uuid.UUID) -> Replay:
    return get_object_or_404(
        Replay.objects.select_related("job"), pk=replay_id, job__matter__grants__user=user
    )


@dataclass(frozen=True)
class JobFilters:
    matter: Matter | None = None
    since: datetime.date | None = None
    until: datetime.date | None = None
    model: str = ""
    status: str = ""
    verification: str = ""  # "", "never", "verified" or "broken"
    q: str = ""


@dataclass
class Page:
    rows: list
    number: int
    has_next: bool

    @property
    def has_previous(self) -> bool:
        return self.number > 1


def _latest_verification(field: str) -> Subquery:
    latest = TrailVerification.objects.filter(
        job=OuterRef("pk"), trail_id=OuterRef("trail_id")
    ).order_by("-at", "-id")
    return Subquery(latest.values(field)[:1])


def job_list(*, user, filters: JobFilters, page: int = 1, page_size: int | None = None) -> Page:
    """One page of the reviewer's jobs, newest first. No COUNT: page_size + 1 rows are fetched
    to learn whether a next page exists."""
    page_size = page_size or PAGE_SIZE
    jobs = job_queryset_for(user=user)
    if filters.verification:
        # Filtering by the latest verdict needs it for every candidate row; otherwise it is
        # read for the page's rows only, after the page is cut.
        jobs = jobs.annotate(verified_ok=_latest_verification("ok"))
    if filters.matter is not None:
        jobs = jobs.filter(matter=filters.matter)
    if filters.since is not None:
        jobs = jobs.filter(created_at__gte=start_of_day(filters.since))
    if filters.until is not None:
        jobs = jobs.filter(created_at__lt=start_of_day(filters.until + datetime.timedelta(days=1)))
    if filters.model:
        jobs = jobs.filter(model_spec__name=filters.model)
    if filters.status:
        jobs = jobs.filter(status=filters.status)
    if filters.verification == "never":
        jobs = jobs.filter(verified_ok__isnull=True)
    elif filters.verification == "verified":
        jobs = jobs.filter(verified_ok=True)
    elif filters.verification == "broken":
        jobs = jobs.filter(verified_ok=False)
    if filters.q:
        jobs = job_search(jobs, filters.q)
    offset = (page - 1) * page_size
    ids = list(
        jobs.order_by("-created_at", "-id").values_list("id", flat=True)[
            offset : offset + page_size + 1
        ]
    )
    rows = list(
        GenerationJob.objects.filter(id__in=ids[:page_size])
        .select_related("matter", "model_spec")
        .annotate(verified_ok=_latest_verification("ok"), verified_at=_latest_verification("at"))
        .order_by("-created_at", "-id")
    )
    return Page(rows=rows, number=page, has_next=len(ids) > page_size)


def trail_of(*, job: GenerationJob) -> Trail | None:
    if job.trail_id is None:
        return None
    return Trail.objects.filter(pk=job.trail_id).first()


def trail_payloads(*, job: GenerationJob) -> list[dict]:
    """Every decision record of the job's trail, parsed, in step order."""
    return job_decisions(job)


def trail_step_count(*, job: GenerationJob) -> int:
    if job.trail_id is None:
        return 0
    return trail_decisions(trail_id=job.trail_id).count()


def trail_step(*, job: GenerationJob, step: int) -> Step | None:
    trail = trail_of(job=job)
    payload = trail_decision(trail=trail, step=step) if trail is not None else None
    return step_present(payload) if payload is not None else None


def output_tokens(payloads: list[dict]) -> list[dict]:
    """The full output, token by token, each naming the step that emitted it."""
    return [token for payload in payloads for token in emitted_tokens(payload)]


def verification_latest(*, job: GenerationJob) -> TrailVerification | None:
    if job.trail_id is None:
        return None
    return (
        TrailVerification.objects.filter(job=job, trail_id=job.trail_id)
        .select_related("user")
        .order_by("-at", "-id")
        .first()
    )


def annotation_list(*, job: GenerationJob) -> list[Annotation]:
    return list(
        Annotation.objects.filter(job=job, trail_id=job.trail_id)
        .select_related("user")
        .order_by("created_at", "id")
    )


def sign_off_list(*, job: GenerationJob) -> list[SignOff]:
    return list(
        SignOff.objects.filter(job=job, trail_id=job.trail_id)
        .select_related("user")
        .order_by("at", "id")
    )


def custody_event_list(
    *, user, before: int | None = None, page_size: int | None = None
) -> CustodyPage:
    """Custody events, newest first, of the reviewer's matters' jobs (all of them for staff):
    those before seq `before`, or the newest. Keyset pages (no COUNT, no OFFSET), so the
    oldest page costs what the newest does."""
    page_size = page_size or PAGE_SIZE
    events = CustodyEvent.objects.select_related("user")
    if not user.is_staff:
        # Their matters' jobs' events, and their own matter exports (which name no one job).
        events = events.filter(
            Q(job_id__in=job_queryset_for(user=user).values("id"))
            | Q(job_id__isnull=True, user=user)
        )
    if before is not None:
        events = events.filter(seq__lt=before)
    rows = list(events.order_by("-seq")[: page_size + 1])
    return CustodyPage(
        rows=rows[:page_size],
        newest=before is None,
        older_than=rows[page_size - 1].seq if len(rows) > page_size else None,
    )


@dataclass
class CustodyPage:
    rows: list
    newest: bool  # the first page
    older_than: int | None  # the `before` of the next (older) page, if there is one

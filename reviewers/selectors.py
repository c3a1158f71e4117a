"""Reads for the portal. Every lookup of a job, replay or custody event is scoped to the matters
granted to the reviewer: anything else is a 404, with no hint that it exists."""

from __future__ import annotations

import datetime
import json
import uuid
from collections import defaultdict
from dataclasses import dataclass

import orjson
from django.db.models import (
    Case,
    CharField,
    DateTimeField,
    F,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
    Value,
    When,
)
from django.shortcuts import get_object_or_404

from audit.evidence import binding
from audit.models import DecisionRecord, Trail, VerificationRun
from audit.selectors import trail_decision, trail_decisions
from decoding.batches import line_outcomes
from decoding.claims import job_claim
from decoding.models import Batch, BatchLine, GenerationJob, Matter, Replay
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
        job_queryset_for(user=user).select_related("matter", "model_spec", "api_key", "batch_line"),
        pk=job_id,
    )


def batch_list_for(*, user) -> list[tuple[Batch, dict]]:
    """The batches of the reviewer's matters, newest first, each with how its lines ended."""
    found = (
        Batch.objects.filter(matter__grants__user=user)
        .select_related("matter")
        .annotate(lines_total=F("input_file__line_count"), file_name=F("input_file__filename"))[
            :200
        ]
    )
    return [(batch, line_outcomes(batch)) for batch in found]


def batch_get_for(*, user, batch_id: str) -> Batch:
    batches = Batch.objects.select_related("matter").annotate(
        lines_total=F("input_file__line_count")
    )
    return get_object_or_404(batches, pk=batch_id, matter__grants__user=user)


def batch_lines(batch: Batch, page: int) -> Page:
    """A page of the batch's lines in file order, each with its job (None: refused)."""
    start = (page - 1) * PAGE_SIZE
    rows = list(
        BatchLine.objects.filter(batch=batch)
        .select_related("job")
        .order_by("line")[start : start + PAGE_SIZE + 1]
    )
    return Page(rows=rows[:PAGE_SIZE], number=page, has_next=len(rows) > PAGE_SIZE)


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


def with_verification(jobs: QuerySet[GenerationJob]) -> QuerySet[GenerationJob]:
    """Each job's `verification_state` ("never", "verified" or "broken"), `verification_at` and
    `verification_by` ("reviewer" or "verify_chain"): the more recent of a reviewer's Verify of
    its trail and the last whole-store verification (`verify_chain --all`, beat's verify_all),
    which speaks for every trail made before it started: broken where its failures name the
    trail (or name none, when it found the store itself broken), else verified."""
    jobs = jobs.annotate(
        verified_ok=_latest_verification("ok"), verified_at=_latest_verification("at")
    )
    run = VerificationRun.objects.filter(scope="all").order_by("-id").first()
    reviewer = Q(verified_ok__isnull=False)
    if run is None:
        covered = Q(pk__in=[])
    else:
        made = Trail.objects.filter(pk=OuterRef("trail_id")).values("created_at")[:1]
        jobs = jobs.annotate(trail_made=Subquery(made))
        covered = Q(trail_made__lt=run.started_at)
        reviewer &= Q(verified_at__gt=run.finished_at) | Q(trail_made__gte=run.started_at)
    named = [f["trail"] for f in (run.failures if run else []) if f.get("trail")]
    store_broken = run is not None and not run.ok and not named
    by_store = Value("broken") if store_broken else Value("verified")
    return jobs.annotate(
        verification_state=Case(
            When(reviewer & Q(verified_ok=True), then=Value("verified")),
            When(reviewer, then=Value("broken")),
            When(covered & Q(trail_id__in=named), then=Value("broken")),
            When(covered, then=by_store),
            default=Value("never"),
            output_field=CharField(),
        ),
        verification_at=Case(
            When(reviewer, then=F("verified_at")),
            When(covered, then=Value(run.finished_at if run else None)),
            default=None,
            output_field=DateTimeField(),
        ),
        verification_by=Case(
            When(reviewer, then=Value("reviewer")),
            When(covered, then=Value("verify_chain")),
            default=Value(""),
            output_field=CharField(),
        ),
    )


def _mark_unbound(rows: list[GenerationJob]) -> None:
    """Set each row's `unbound`: whether its question or answer no longer matches what its
    trail's request and answer records bind. The application's database role can rewrite a job
    row, never its trail, so a rewritten answer is marked in the list before anyone presses
    Verify. Two records per row, which an index of the non-decision records holds."""
    trails = Trail.objects.in_bulk([row.trail_id for row in rows if row.trail_id])
    records = defaultdict(list)
    bound = (
        DecisionRecord.objects.filter(trail_id__in=list(trails))
        .exclude(kind=DecisionRecord.Kind.DECISION)
        .order_by("seq")
        .values_list("trail_id", "seq", "payload")
    )
    for trail_id, seq, payload in bound:
        records[trail_id].append((seq, payload))
    for row in rows:
        trail = trails.get(row.trail_id)
        row.unbound = False
        if trail is None or trail.format_version < 2:
            continue  # no trail yet, or one from before rows were bound to their trails
        contents = binding.Contents(trail_id=str(trail.pk), format_version=trail.format_version)
        for seq, payload in records[trail.pk]:
            contents.observe(seq, orjson.loads(payload))
        row.unbound = bool(binding.claim_failures(job_claim(row), contents, trail.salt))


def job_list(*, user, filters: JobFilters, page: int = 1, page_size: int | None = None) -> Page:
    """One page of the reviewer's jobs, newest first. No COUNT: page_size + 1 rows are fetched
    to learn whether a next page exists."""
    page_size = page_size or PAGE_SIZE
    jobs = job_queryset_for(user=user)
    if filters.verification:
        # Filtering by the latest verdict needs it for every candidate row; otherwise it is
        # read for the page's rows only, after the page is cut.
        jobs = with_verification(jobs).filter(verification_state=filters.verification)
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
    if filters.q:
        jobs = job_search(jobs, filters.q)
    offset = (page - 1) * page_size
    ids = list(
        jobs.order_by("-created_at", "-id").values_list("id", flat=True)[
            offset : offset + page_size + 1
        ]
    )
    rows = list(
        with_verification(GenerationJob.objects.filter(id__in=ids[:page_size]))
        .select_related("matter", "model_spec", "api_key", "batch_line")
        .order_by("-created_at", "-id")
    )
    _mark_unbound(rows)
    return Page(rows=rows, number=page, has_next=len(ids) > page_size)


def trail_of(*, job: GenerationJob) -> Trail | None:
    if job.trail_id is None:
        return None
    return Trail.objects.filter(pk=job.trail_id).first()


def matters_on_hold(*, user) -> list[Matter]:
    """The reviewer's matters under a legal hold, oldest hold first."""
    return list(
        Matter.objects.filter(grants__user=user, hold_since__isnull=False).order_by("hold_since")
    )


def trail_payloads(*, job: GenerationJob) -> list[dict]:
    """Every decision record of the job's trail, parsed, in step order; none for a destroyed
    job, whose decisions are commitments nothing opens any more."""
    return [] if job.destroyed_at else job_decisions(job)


def trail_step_count(*, job: GenerationJob) -> int:
    if job.trail_id is None:
        return 0
    return trail_decisions(trail_id=job.trail_id).count()


def trail_step(*, job: GenerationJob, step: int) -> Step | None:
    if job.destroyed_at:
        return None
    trail = trail_of(job=job)
    payload = trail_decision(trail=trail, step=step) if trail is not None else None
    return step_present(payload) if payload is not None else None


def output_tokens(payloads: list[dict]) -> list[dict]:
    """The full output, token by token, each naming the step that emitted it."""
    return [token for payload in payloads for token in emitted_tokens(payload)]


def verification_of_store(*, job: GenerationJob) -> dict | None:
    """What the last whole-store verification said of the job's trail, when that is newer than
    any reviewer's Verify of it (with_verification): {"state", "at"}; else None."""
    found = (
        with_verification(GenerationJob.objects.filter(pk=job.pk))
        .values("verification_state", "verification_at", "verification_by")
        .first()
    )
    if found is None or found["verification_by"] != "verify_chain":
        return None
    return {"state": found["verification_state"], "at": found["verification_at"]}


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


def structured_output(job: GenerationJob) -> dict | None:
    """What a structured-output job's page shows beside its answer: the response_format's type,
    name and strict flag, and its schema as indented JSON (None without one, or once its texts
    were destroyed: a schema can say as much as a prompt)."""
    if not job.response_format or job.destroyed_at:
        return None
    response_format = json.loads(job.response_format)
    spec = response_format.get("json_schema") or {}
    schema = spec.get("schema", {"type": "object"})
    return {
        "type": response_format["type"],
        "name": spec.get("name"),
        "strict": bool(spec.get("strict")),
        "schema": json.dumps(schema, indent=2, ensure_ascii=False),
    }

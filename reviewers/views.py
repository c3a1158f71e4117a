"""The reviewer portal: plain function views over server-rendered templates, with small htmx
fragments for the live parts (the step panel, verification, replay, sign-off). Every page also
works without JavaScript: the forms post normally and redirect back to the trail."""

from __future__ import annotations

import uuid
from collections import Counter

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import FileResponse, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.http import content_disposition_header
from django.views.decorators.http import require_GET, require_POST

from audit import examiner_package
from audit.evidence import descriptive
from audit.keys import shown_verifier_keys
from decoding.batches import line_outcomes

from . import charts, selectors, services
from .custody_chain import custody_chain_pending, custody_verify
from .custody_words import sentence
from .forms import (
    MAX_PAGE,
    AnnotationForm,
    CustodyPageForm,
    JobFilterForm,
    MatterExportForm,
    StepForm,
    errors_text,
)
from .steps import step_present


def _htmx(request) -> bool:
    return request.headers.get("HX-Request") == "true"


def _walk_url(job, step: int | None = None, anchor: str = "") -> str:
    url = reverse("reviewers:job", args=[job.id])
    if step is not None:
        url += f"?step={step}"
    return url + (f"#{anchor}" if anchor else "")


def _bad_request(request, message: str) -> HttpResponse:
    return render(request, "reviewers/problem.html", {"message": message}, status=400)


def _clamp(step: int | None, count: int) -> int:
    return min(max(step or 0, 0), max(count - 1, 0))


@login_required
@require_GET
def trail_list(request):
    form = JobFilterForm(request.GET, user=request.user)
    if not form.is_valid():
        context = {"form": form, "page": None, "problem": errors_text(form)}
        return render(request, "reviewers/trail_list.html", context, status=400)
    page = selectors.job_list(
        user=request.user, filters=form.filters(), page=form.cleaned_data.get("page") or 1
    )
    export_form = MatterExportForm(user=request.user, prefix="export")
    holds = selectors.matters_on_hold(user=request.user)
    context = {"form": form, "page": page, "export_form": export_form, "holds": holds}
    return render(request, "reviewers/trail_list.html", context)


def _step_context(job, step_number: int, step_count: int, step, annotations=None) -> dict:
    if annotations is None:
        annotations = selectors.annotation_list(job=job)
    return {
        "job": job,
        "step": step,
        "step_number": step_number,
        "step_count": step_count,
        "prev_step": step_number - 1 if step_number > 0 else None,
        "next_step": step_number + 1 if step_number + 1 < step_count else None,
        "step_url": reverse("reviewers:step", args=[job.id]),
        "step_notes": [note for note in annotations if note.step == step_number],
    }


@login_required
@require_GET
def job_walk(request, job_id: uuid.UUID):
    job = selectors.job_get_for(user=request.user, job_id=job_id)
    step_form = StepForm(request.GET)
    if not step_form.is_valid():
        return _bad_request(request, errors_text(step_form))
    payloads = selectors.trail_payloads(job=job)
    step_number = _clamp(step_form.cleaned_data["step"], len(payloads))
    step = step_present(payloads[step_number]) if payloads else None
    services.trail_view_record(user=request.user, job=job, step=step_number if payloads else None)
    annotations = selectors.annotation_list(job=job)
    latest_replay = job.replays.filter(trail_id=job.trail_id).order_by("-created_at").first()
    context = {
        **_step_context(job, step_number, len(payloads), step, annotations),
        "trail": selectors.trail_of(job=job),
        "output": selectors.output_tokens(payloads),
        "per_step": charts.accepted_per_step(payloads),
        "by_position": charts.acceptance_by_position(payloads),
        "verification": selectors.verification_latest(job=job),
        "store_verification": selectors.verification_of_store(job=job),
        "replay": latest_replay,
        "trail_notes": [note for note in annotations if note.step is None],
        "noted_steps": [
            {"step": step, "count": count}
            for step, count in sorted(
                Counter(note.step for note in annotations if note.step is not None).items()
            )
        ],
        "sign_offs": selectors.sign_off_list(job=job),
        "structured": selectors.structured_output(job),
    }
    return render(request, "reviewers/walk.html", context)


@login_required
@require_GET
def job_step(request, job_id: uuid.UUID):
    """The step panel alone, for htmx navigation; it pushes the full page's URL."""
    job = selectors.job_get_for(user=request.user, job_id=job_id)
    step_form = StepForm(request.GET)
    if not step_form.is_valid():
        return _bad_request(request, errors_text(step_form))
    step_count = selectors.trail_step_count(job=job)
    step_number = _clamp(step_form.cleaned_data["step"], step_count)
    step = selectors.trail_step(job=job, step=step_number)
    services.trail_view_record(
        user=request.user, job=job, step=step_number if step is not None else None
    )
    context = _step_context(job, step_number, step_count, step)
    response = render(request, "reviewers/_step.html", context)
    response["HX-Push-Url"] = _walk_url(job, step_number)
    return response


def _refused(request, job, message: str, template: str, context: dict, anchor: str, status=409):
    """A refusal: the fragment with the reason (its status) for htmx, else a message on the
    trail."""
    if _htmx(request):
        return render(request, template, {**context, "job": job, "refusal": message}, status=status)
    messages.error(request, message)
    return redirect(_walk_url(job, anchor=anchor))


@login_required
@require_POST
def job_verify(request, job_id: uuid.UUID):
    job = selectors.job_get_for(user=request.user, job_id=job_id)
    try:
        verification = services.trail_verify(user=request.user, job=job)
    except services.PortalRefusal as exc:
        context = {"verification": selectors.verification_latest(job=job)}
        return _refused(
            request, job, str(exc), "reviewers/_verification.html", context, "verification"
        )
    if _htmx(request):
        context = {"job": job, "verification": verification}
        return render(request, "reviewers/_verification.html", context)
    return redirect(_walk_url(job, anchor="verification"))


@login_required
@require_POST
def job_replay(request, job_id: uuid.UUID):
    job = selectors.job_get_for(user=request.user, job_id=job_id)
    try:
        replay = services.replay_start(user=request.user, job=job)
    except services.PortalRefusal as exc:
        return _refused(
            request, job, str(exc), "reviewers/_replay.html", {}, "replay-result", exc.status
        )
    if _htmx(request):
        return render(request, "reviewers/_replay.html", {"job": job, "replay": replay})
    return redirect("reviewers:replay", replay_id=replay.id)


@login_required
@require_GET
def replay_status(request, replay_id: uuid.UUID):
    """The replay's state; htmx polls the fragment every second until it is done."""
    replay = selectors.replay_get_for(user=request.user, replay_id=replay_id)
    context = {"job": replay.job, "replay": replay}
    if _htmx(request):
        return render(request, "reviewers/_replay.html", context)
    return render(request, "reviewers/replay.html", context)


@login_required
@require_POST  # it appends a custody event: never from a link another site can make you follow
def job_export(request, job_id: uuid.UUID):
    job = selectors.job_get_for(user=request.user, job_id=job_id)
    try:
        bundle = services.bundle_export(user=request.user, job=job)
    except services.PortalRefusal as exc:
        messages.error(request, str(exc))
        return redirect(_walk_url(job, anchor="evidence"))
    return _zip_response(bundle)


@login_required
@require_POST  # it appends a custody event, as a bundle's export does
def job_receipt(request, job_id: uuid.UUID):
    job = selectors.job_get_for(user=request.user, job_id=job_id)
    try:
        receipt, filename = services.receipt_export(user=request.user, job=job)
    except services.PortalRefusal as exc:
        messages.error(request, str(exc))
        return redirect(_walk_url(job, anchor="evidence"))
    response = HttpResponse(receipt, content_type="application/cose")
    response["Content-Disposition"] = content_disposition_header(True, filename)
    return response


def _zip_response(bundle) -> FileResponse:
    response = FileResponse(
        bundle.handle, as_attachment=True, filename=bundle.filename, content_type="application/zip"
    )
    response["X-Content-SHA256"] = bundle.sha256
    return response


@login_required
@require_POST  # it appends a custody event, as a trail's export does
def matter_export(request):
    form = MatterExportForm(request.POST, user=request.user, prefix="export")
    if not form.is_valid():
        return _bad_request(request, errors_text(form))
    data = form.cleaned_data
    try:
        bundle = services.matter_export(
            user=request.user, matter=data["matter"], since=data["since"], until=data["until"]
        )
    except services.PortalRefusal as exc:
        messages.error(request, str(exc))
        return redirect(reverse("reviewers:trails") + "#produce")
    return _zip_response(bundle)


@login_required
@require_GET
def batch_list(request):
    context = {"batches": selectors.batch_list_for(user=request.user)}
    return render(request, "reviewers/batch_list.html", context)


@login_required
@require_GET
def batch_detail(request, batch_id: str):
    batch = selectors.batch_get_for(user=request.user, batch_id=batch_id)
    try:
        page = max(int(request.GET.get("page") or 1), 1)
    except ValueError:
        return _bad_request(request, "page: must be a whole number")
    if page > MAX_PAGE:  # past any batch's lines, and past what the database can offset
        return _bad_request(request, f"page: at most {MAX_PAGE}")
    context = {
        "batch": batch,
        "counts": line_outcomes(batch),
        "page": selectors.batch_lines(batch, page),
    }
    return render(request, "reviewers/batch_detail.html", context)


@login_required
@require_POST  # it appends a custody event, as a matter's export does
def batch_export(request, batch_id: str):
    batch = selectors.batch_get_for(user=request.user, batch_id=batch_id)
    try:
        bundle = services.batch_export(user=request.user, batch=batch)
    except services.PortalRefusal as exc:
        messages.error(request, str(exc))
        return redirect(reverse("reviewers:batch", args=[batch.pk]) + "#produce")
    return _zip_response(bundle)


@login_required
@require_POST
def job_annotate(request, job_id: uuid.UUID):
    job = selectors.job_get_for(user=request.user, job_id=job_id)
    if job.trail_id is None:
        return _bad_request(request, "this job has no audit trail yet to annotate")
    form = AnnotationForm(request.POST, step_count=selectors.trail_step_count(job=job))
    if not form.is_valid():
        return _bad_request(request, errors_text(form))
    step = form.cleaned_data["step"]
    services.annotation_create(
        user=request.user, job=job, text=form.cleaned_data["text"], step=step
    )
    messages.success(request, "Note added.")
    return redirect(_walk_url(job, step, anchor="notes"), permanent=False)


@login_required
@require_POST
def job_sign_off(request, job_id: uuid.UUID):
    job = selectors.job_get_for(user=request.user, job_id=job_id)
    try:
        services.sign_off_create(user=request.user, job=job)
    except services.PortalRefusal as exc:
        context = {"sign_offs": selectors.sign_off_list(job=job)}
        return _refused(request, job, str(exc), "reviewers/_sign_offs.html", context, "sign-offs")
    if _htmx(request):
        context = {"job": job, "sign_offs": selectors.sign_off_list(job=job)}
        return render(request, "reviewers/_sign_offs.html", context)
    return redirect(_walk_url(job, anchor="sign-offs"))


@login_required
@require_GET
def bundle_verify(request):
    """The in-browser verifier (static/reviewers/verify.js): the page only hosts it; every
    check runs on the reviewer's machine against the keys they pinned."""
    context = {
        "bundle_texts": descriptive.TEXTS,
        # This service's log, whose tiles the page reads to check a matter of it complete.
        "log_url": reverse("log:checkpoint").removesuffix("checkpoint"),
        "log_origin": settings.PATHFINDER_LOG_ORIGIN,
        "examiner_wheel": examiner_package.wheel(),
        "verifier_keys": shown_verifier_keys(),
    }
    return render(request, "reviewers/verify.html", context)


@login_required
@require_GET
def custody_log(request):
    form = CustodyPageForm(request.GET)
    if not form.is_valid():
        return _bad_request(request, errors_text(form))
    custody_chain_pending()  # views still waiting for the chain are listed chained
    page = selectors.custody_event_list(user=request.user, before=form.cleaned_data["before"])
    visible_jobs = set(
        selectors.job_queryset_for(user=request.user)
        .filter(id__in=[event.job_id for event in page.rows if event.job_id])
        .values_list("id", flat=True)
    )
    report, since = custody_verify()
    context = {
        "page": page,
        "events": [(event, sentence(event)) for event in page.rows],
        "report": report,
        "since": since,
        "visible_jobs": visible_jobs,
    }
    return render(request, "reviewers/custody.html", context)

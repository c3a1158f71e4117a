"""Reads for the API: every lookup is scoped to the caller's matter."""

import datetime
import json
import uuid

from django.shortcuts import get_object_or_404
from rest_framework.exceptions import APIException

from audit.evidence import binding, chain
from audit.models import DecisionRecord, Trail
from audit.selectors import trail_clear_decisions, trail_record_of_kind
from decoding.claims import job_served
from decoding.models import ApiKey, GenerationJob, Matter


class AnswerNotRecorded(APIException):
    """The job row's output is not what its trail's answer record binds: it is not served
    (an API answers 500 with this message: the fault is ours, not the caller's)."""

    status_code = 500
    default_code = "answer_not_recorded"


# A page of jobs carries each one's trail and recorded answer, read for the page at once
# (jobs_with_trails); a single job reads its own.
_TRAIL, _ANSWER = "_page_trail", "_page_answer"


def jobs_with_trails(jobs) -> list[GenerationJob]:
    """The jobs with their trails and recorded answers, in two queries for all of them (a job
    list would otherwise make three per row)."""
    jobs = list(jobs)
    ids = [job.trail_id for job in jobs if job.trail_id is not None]
    trails = Trail.objects.in_bulk(ids)
    answers = dict(
        DecisionRecord.objects.filter(trail_id__in=ids, kind=binding.ANSWER).values_list(
            "trail_id", "payload"
        )
    )
    for job in jobs:
        setattr(job, _TRAIL, trails.get(job.trail_id))
        answer = answers.get(job.trail_id)
        setattr(job, _ANSWER, json.loads(answer) if answer is not None else None)
    return jobs


def job_answer(job: GenerationJob) -> binding.Answer | None:
    """What the job serves, taken from its recorded answer: the token ids as recorded, and the
    row's text only if it is the text whose digest was recorded. None until it served one.

    Trails of format v1 (before answers were recorded) bind no answer: their row is served.
    """
    trail = trail_for_job(job)
    if not job_served(job) or trail is None:
        return None
    row = binding.Answer(tuple(job.output_token_ids), job.output_text, job.stop_reason)
    if trail.format_version < 2:
        return row
    if hasattr(job, _ANSWER):
        recorded = getattr(job, _ANSWER)
    else:
        recorded = trail_record_of_kind(trail_id=trail.id, kind=binding.ANSWER)
    if recorded is None:
        raise AnswerNotRecorded(f"job {job.id}: its trail recorded no answer")
    if not binding.text_matches(
        recorded["output_text_digest"],
        binding.field_salt(trail.salt, binding.ANSWER_TEXT),
        job.output_text,
    ):
        raise AnswerNotRecorded(f"job {job.id}: its output text is not the recorded answer")
    if "output_token_ids" in recorded:  # v2: in clear
        token_ids = tuple(recorded["output_token_ids"])
    elif binding.text_matches(
        recorded["output_token_ids_digest"],
        binding.field_salt(trail.salt, binding.ANSWER_TOKEN_IDS),
        chain.canonical_json(list(row.token_ids)),
    ):
        token_ids = row.token_ids
    else:
        raise AnswerNotRecorded(f"job {job.id}: its output tokens are not the recorded answer")
    return binding.Answer(token_ids, job.output_text, recorded["stop_reason"])


def job_get_for_key(*, api_key: ApiKey, job_id: uuid.UUID) -> GenerationJob:
    """The job, if it belongs to the key's matter; 404 otherwise (no hint that it exists)."""
    return get_object_or_404(GenerationJob, pk=job_id, matter_id=api_key.matter_id)


def jobs_for_key(
    *, api_key: ApiKey, status: str | None = None, created_after=None, created_before=None
):
    """The key's matter's jobs, newest first, optionally by status and creation time."""
    jobs = GenerationJob.objects.filter(matter_id=api_key.matter_id).select_related(
        "matter", "model_spec"
    )
    if status:
        jobs = jobs.filter(status=status)
    if created_after is not None:
        jobs = jobs.filter(created_at__gte=created_after)
    if created_before is not None:
        jobs = jobs.filter(created_at__lt=created_before)
    return jobs


def trail_for_job(job: GenerationJob) -> Trail | None:
    if job.trail_id is None:
        return None
    if hasattr(job, _TRAIL):
        return getattr(job, _TRAIL)
    return Trail.objects.filter(pk=job.trail_id).first()


def job_decisions(job: GenerationJob) -> list[dict]:
    """The decision payloads of the job's trail, clear, in step order."""
    if job.trail_id is None:
        return []
    return trail_clear_decisions(trail_id=job.trail_id)


def trail_records(job: GenerationJob):
    return DecisionRecord.objects.filter(trail_id=job.trail_id).order_by("seq")


def matter_trail_ids(
    matter: Matter, *, since: datetime.date | None = None, until: datetime.date | None = None
) -> list[uuid.UUID]:
    """Every trail (every attempt) of the matter's jobs submitted from `since` to `until`
    (days in UTC, both inclusive): what a matter export produces."""
    jobs = GenerationJob.objects.filter(matter=matter)
    if since is not None:
        jobs = jobs.filter(created_at__gte=start_of_day(since))
    if until is not None:
        jobs = jobs.filter(created_at__lt=start_of_day(until + datetime.timedelta(days=1)))
    trails = Trail.objects.filter(job_id__in=jobs.values("id")).order_by("id")
    return list(trails.values_list("id", flat=True))


def batch_trail_ids(batch_id: str) -> list[uuid.UUID]:
    """Every trail (every attempt) of a batch's lines' jobs: what a batch's bundle produces."""
    jobs = GenerationJob.objects.filter(batch_line__batch_id=batch_id)
    trails = Trail.objects.filter(job_id__in=jobs.values("id")).order_by("id")
    return list(trails.values_list("id", flat=True))


def start_of_day(day: datetime.date) -> datetime.datetime:
    return datetime.datetime.combine(day, datetime.time.min, tzinfo=datetime.UTC)

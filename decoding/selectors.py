"""Reads for the API: every lookup is scoped to the caller's matter."""

import uuid

from django.shortcuts import get_object_or_404

from audit.models import DecisionRecord, Trail
from decoding.models import ApiKey, GenerationJob


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
    return Trail.objects.filter(pk=job.trail_id).first()


def trail_records(job: GenerationJob):
    return DecisionRecord.objects.filter(trail_id=job.trail_id).order_by("seq")

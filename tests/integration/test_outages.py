"""Outages lose nothing: a job that cannot be queued is marked failed with the reason, not left
queued forever. (The HTTP side, a 503, is covered end to end in tests/system.)"""

import pytest

from decoding.models import GenerationJob
from decoding.services import QueueUnavailable, job_submit
from pathfinder_site import celery_app
from tests.integration.conftest import JOB_DEFAULTS


@pytest.fixture
def broker_down(monkeypatch):
    """Point Celery at a port where no broker listens: a real connection refusal."""
    monkeypatch.setattr(celery_app.conf, "broker_url", "redis://127.0.0.1:9/0")
    monkeypatch.setattr(celery_app, "_pool", None)
    monkeypatch.setattr(celery_app.amqp, "_producer_pool", None)


def test_a_job_that_cannot_be_queued_is_failed_with_the_reason(
    owner, broker_down, django_capture_on_commit_callbacks
):
    with (
        pytest.raises(QueueUnavailable),
        django_capture_on_commit_callbacks(execute=True),
    ):
        job_submit(
            api_key=owner.key, prompt_token_ids=[1, 2], request_id="during-outage", **JOB_DEFAULTS
        )
    job = GenerationJob.objects.get(request_id="during-outage")
    assert job.status == "failed"
    assert "queue is unavailable" in job.error
    assert job.output_token_ids == []

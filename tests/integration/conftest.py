"""What tests against the real PostgreSQL share beyond the cast (tests/conftest.py): a helper that
runs a job on this process the way a worker does, the signing host, the queue's sends."""

import pytest

from audit.keys import signing_key_create
from decoding.models import GenerationJob
from decoding.services import job_submit
from decoding.worker.execution import job_run
from pathfinder_site import celery_app

JOB_DEFAULTS = {
    "max_tokens": 30,
    "temperature": 0.0,
    "top_k": 0,
    "top_p": 1.0,
    "seed": 7,
    "draft_length": 4,
    "eos_token_id": None,
}


@pytest.fixture(autouse=True)
def stub_model_by_default(settings):
    """Requests that name no model get the stub pair: these tests are about the service, and
    tests/models covers the real weights."""
    settings.PATHFINDER_DEFAULT_MODEL = "stub"


@pytest.fixture(autouse=True)
def signing_host(settings, tmp_path):
    """Each test signs checkpoints with a key of its own and publishes them to a directory of
    its own, as the host that runs beat does."""
    settings.PATHFINDER_CHECKPOINT_KEY_FILE = tmp_path / "signing.key"
    settings.PATHFINDER_CHECKPOINT_PUBLISH_DIR = tmp_path / "published"
    key, _ = signing_key_create()
    return key


@pytest.fixture
def beat(signing_host):
    """What Celery beat does within PATHFINDER_CHECKPOINT_INTERVAL_S of a seal: sign (and
    publish) a checkpoint of the log, so sealed trails can be proven and exported."""
    from audit.log import checkpoint_create

    return checkpoint_create


@pytest.fixture
def run_job(owner):
    """Submit and decode a job in this process (no broker: on_commit never fires in a test
    transaction), returning the finished job."""

    def run(prompt=(1, 2, 3), **overrides) -> GenerationJob:
        job, _ = job_submit(
            matter=owner.key.matter,
            api_key=owner.key,
            model="stub",
            prompt_token_ids=list(prompt),
            **{**JOB_DEFAULTS, **overrides},
        )
        job_run(job_id=job.id)
        job.refresh_from_db()
        return job

    return run


@pytest.fixture
def fast_passwords(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def sent_jobs(monkeypatch) -> list[str]:
    """The job ids handed to the queue (the broker itself is exercised by tests/system and
    tests/faults; here: which jobs are sent), with the priority each was sent at in
    `sent_jobs.priorities` and the queue each was sent to in `sent_jobs.queues`."""
    sent = SentJobs()

    def send_task(name, args, priority, task_id, queue):
        assert name == "decoding.run_generation" and task_id == args[0]  # decoding.delivery
        sent.append(args[0])
        sent.priorities.append(priority)
        sent.queues.append(queue)

    monkeypatch.setattr(celery_app, "send_task", send_task)
    return sent


class SentJobs(list):
    def __init__(self):
        super().__init__()
        self.priorities: list[int] = []
        self.queues: list[str | None] = []  # None: the shared queue

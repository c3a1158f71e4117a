"""A job's lifecycle has one home (decoding.lifecycle): every status change is conditional on the
state it leaves and the attempt that owns it, and nothing else writes a job's status. A request
is checked once, by the service (decoding.job_input), so `manage.py generate` refuses what the
APIs refuse, naming the same field, and stores nothing."""

import ast
import pathlib

import pytest
from django.core.management import CommandError, call_command

from decoding import lifecycle
from decoding.models import GenerationJob

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture
def queued(owner):
    def submit(**body):
        response = owner.api.post(
            "/api/v1/generations",
            {"prompt_token_ids": [1, 2], "max_tokens": 4, **body},
            format="json",
        )
        assert response.status_code == 202, response.json()
        return GenerationJob.objects.get(pk=response.json()["id"])

    return submit


def row(job) -> GenerationJob:
    return GenerationJob.objects.get(pk=job.pk)


def test_a_transition_from_a_state_the_job_is_not_in_changes_nothing(queued, run_job):
    job = queued()
    assert not lifecycle.failed_requeue(job.pk)  # not failed
    assert lifecycle.attempt_finish(job.pk, 0, cancelled=False, output_text="x") is None
    assert not lifecycle.attempt_fail(job.pk, 0, GenerationJob.Failure.GENERATION_FAILED)
    assert row(job).status == "queued" and row(job).output_text == ""

    done = run_job()
    assert done.status == "succeeded"
    assert not lifecycle.queued_cancel(done.pk)
    assert not lifecycle.queue_failed(done.pk)
    assert not lifecycle.failed_requeue(done.pk)
    assert row(done).status == "succeeded" and row(done).finished_at == done.finished_at


def test_only_the_attempt_that_owns_a_job_can_end_it(queued):
    job = queued()
    first = row(job)
    assert lifecycle.attempt_start(first, trail_id=job.pk, worker="a:1")
    assert first.attempts == 1 and first.status == "running"
    # A second delivery that read the row before the first started it (no row lock) loses.
    stale = job
    assert not lifecycle.attempt_start(stale, trail_id=job.pk, worker="b:2")
    assert row(job).worker == "a:1"
    # A superseded attempt's answer is refused; the owner's lands once.
    assert lifecycle.attempt_finish(job.pk, 2, cancelled=False, output_text="old") is None
    assert lifecycle.attempt_finish(job.pk, 1, cancelled=False, output_text="new") == "succeeded"
    assert lifecycle.attempt_finish(job.pk, 1, cancelled=True, output_text="again") is None
    ended = row(job)
    assert (ended.status, ended.output_text, ended.lease_expires_at) == ("succeeded", "new", None)


def test_a_transition_the_lifecycle_does_not_have_is_a_programming_error(queued):
    job = queued()
    with pytest.raises(lifecycle.IllegalTransition, match="from succeeded to queued"):
        lifecycle._move(job.pk, leaving=("succeeded",), to="queued")
    assert row(job).status == "queued"


def _status_writes(path: pathlib.Path) -> list[str]:
    """Places in a module that write a GenerationJob's status: an update()/create() keyword
    naming GenerationJob.Status, or an assignment to `<something>.status` of one."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        writes = ("update", "create", "update_or_create")
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) in writes:
            for keyword in node.keywords:
                if keyword.arg == "status" and "GenerationJob" in ast.unparse(keyword.value):
                    found.append(f"{path.name}:{node.lineno}")
        if isinstance(node, ast.Assign):
            targets = [t for t in node.targets if isinstance(t, ast.Attribute | ast.Tuple)]
            text = " ".join(ast.unparse(t) for t in targets)
            if ".status" in text and "GenerationJob.Status" in ast.unparse(node.value):
                found.append(f"{path.name}:{node.lineno}")
    return found


def test_no_module_but_the_lifecycle_writes_a_jobs_status(tmp_path):
    writes = []
    for package in ("decoding", "audit", "reviewers", "pathfinder_site"):
        for path in (ROOT / package).rglob("*.py"):
            if path.name != "lifecycle.py" and "migrations" not in path.parts:
                writes += _status_writes(path)
    assert writes == []
    # The check itself finds such writes.
    sample = tmp_path / "sample.py"
    sample.write_text(
        "GenerationJob.objects.filter().update(status=GenerationJob.Status.FAILED)\n"
        "job.status, job.error = GenerationJob.Status.CANCELLED, ''\n"
    )
    assert sorted(_status_writes(sample)) == ["sample.py:1", "sample.py:2"]


@pytest.mark.parametrize(
    ("argv", "body", "field", "message"),
    [
        (["--max-tokens", "100000"], {"max_tokens": 100000}, "max_tokens", "less than or equal"),
        (["--draft-length", "999"], {"draft_length": 999}, "draft_length", "less than or equal"),
        (["--max-tokens", "0"], {"max_tokens": 0}, "max_tokens", "greater than or equal to 1"),
        (["--model", "no-such"], {"model": "no-such"}, "model", "No model named 'no-such'"),
        (["--temperature", "3"], {"temperature": 3}, "temperature", "less than or equal to 2"),
    ],
)
def test_generate_refuses_what_the_api_refuses_naming_the_same_field(
    owner, argv, body, field, message
):
    before = GenerationJob.objects.count()
    response = owner.api.post(
        "/api/v1/generations",
        {"prompt": "Hello", "model": "smollm2-135m-instruct", **body},
        format="json",
    )
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["field"] == field and message in error["message"]
    with pytest.raises(CommandError) as refused:
        call_command("generate", "--prompt", "Hello", "--model", "smollm2-135m-instruct", *argv)
    assert str(refused.value).startswith(f"{field}: ") and message in str(refused.value)
    assert GenerationJob.objects.count() == before


def test_the_service_refuses_a_chat_to_a_model_without_a_template_on_every_way_in(owner):
    chat = [{"role": "user", "content": "Hi"}]
    native = owner.api.post(
        "/api/v1/generations", {"model": "stub", "messages": chat}, format="json"
    )
    assert native.status_code == 400 and native.json()["error"]["field"] == "messages"
    openai = owner.api.post(
        "/v1/chat/completions", {"model": "stub", "messages": chat}, format="json"
    )
    assert openai.status_code == 400 and openai.json()["error"]["param"] == "messages"
    with pytest.raises(CommandError, match="^messages: Model stub takes prompt_token_ids only"):
        call_command("generate", "--prompt", "Hi", "--chat", "--model", "stub")
    assert not GenerationJob.objects.exists()

"""The Batch API against a live Pathfinder (gunicorn behind the front, two Celery workers, the
real default model), driven by the official `openai` client unchanged: upload, create, retrieve,
download, delete, cancel; an interactive call made while a batch runs is not held behind its
lines; and `manage.py run_batch` from the command line."""

from __future__ import annotations

import io
import json
import statistics
import time
from concurrent.futures import ThreadPoolExecutor

import openai
import pytest

from .helpers import Stack, describe, get

pytestmark = [pytest.mark.system, pytest.mark.timeout(400)]

MODEL = "smollm2-135m-instruct"
ENDED = ("completed", "failed", "expired", "cancelled")
# Held-out review questions, none of them used elsewhere in the suite.
QUESTIONS = [
    "Is a termination-for-convenience clause responsive to a request about exclusivity?",
    "Quote the governing-law clause of a contract that names New York law.",
    "Does a forwarded press release count as a business record?",
    "Name two defences to a claim of anticipatory breach.",
    "What does a litigation hold notice ask an employee to keep?",
]


def chat_line(custom_id: str, question: str, **body) -> dict:
    return {
        "custom_id": custom_id,
        "method": "POST",
        "url": "/v1/chat/completions",
        "body": {"model": MODEL, "messages": [{"role": "user", "content": question}],
                 "max_tokens": 24, "temperature": 0, **body},
    }  # fmt: skip


def jsonl(lines: list[dict | str]) -> io.BytesIO:
    text = "".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines)
    return io.BytesIO(text.encode())


@pytest.fixture(scope="module")
def client(postgres_stack: Stack) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=f"{postgres_stack.base_url}/v1",
        api_key=postgres_stack.api_key,
        max_retries=0,
        timeout=60,
    )


def wait_ended(client: openai.OpenAI, batch_id: str, timeout: float = 240):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        batch = client.batches.retrieve(batch_id)
        if batch.status in ENDED:
            return batch
        time.sleep(0.5)
    raise AssertionError(f"batch {batch_id} still {batch.status} after {timeout}s")


def test_the_official_client_runs_a_batch_and_downloads_its_files(client, postgres_stack):
    lines = [chat_line(f"q{i}", q) for i, q in enumerate(QUESTIONS)]
    lines.insert(2, chat_line("too-hot", QUESTIONS[0], temperature=5))
    lines.insert(4, '{"custom_id": "cut off", "method"')
    uploaded = client.files.create(file=("review.jsonl", jsonl(lines)), purpose="batch")
    assert (uploaded.purpose, uploaded.filename) == ("batch", "review.jsonl")
    batch = client.batches.create(
        input_file_id=uploaded.id,
        endpoint="/v1/chat/completions",
        completion_window="24h",
        metadata={"matter_ref": "2026-cv-0412"},
    )
    assert batch.status == "validating" and batch.metadata == {"matter_ref": "2026-cv-0412"}
    done = wait_ended(client, batch.id)
    assert done.status == "completed"
    counts = done.request_counts
    assert (counts.total, counts.completed, counts.failed) == (7, 5, 2)
    output = [json.loads(x) for x in client.files.content(done.output_file_id).text.splitlines()]
    assert [row["custom_id"] for row in output] == [f"q{i}" for i in range(5)]
    for row in output:
        body = row["response"]["body"]
        assert body["object"] == "chat.completion" and body["choices"][0]["message"]["content"]
        job = get(postgres_stack, f"/api/v1/generations/{body['pathfinder']['job_id']}").json()
        assert job["status"] == "succeeded" and job["trail"]["id"] == body["pathfinder"]["trail_id"]
        assert body["pathfinder"]["head_hash"]
    errors = [json.loads(x) for x in client.files.content(done.error_file_id).text.splitlines()]
    assert [row["custom_id"] for row in errors] == ["too-hot", None]
    assert errors[0]["response"]["body"]["error"]["param"] == "temperature"
    listed = client.batches.list(limit=50)
    assert batch.id in [b.id for b in listed.data]
    assert client.files.retrieve(done.output_file_id).purpose == "batch_output"
    # A batch's files are kept with it; an upload no batch names can be deleted.
    with pytest.raises(openai.ConflictError):
        client.files.delete(done.output_file_id)
    spare = client.files.create(file=("spare.jsonl", jsonl(lines[:1])), purpose="batch")
    assert client.files.delete(spare.id).deleted
    with pytest.raises(openai.NotFoundError):
        client.files.retrieve(spare.id)


def test_the_official_client_cancels_a_batch(client):
    lines = [chat_line(f"c{i}", QUESTIONS[i % 5], max_tokens=64) for i in range(30)]
    uploaded = client.files.create(file=("many.jsonl", jsonl(lines)), purpose="batch")
    batch = client.batches.create(
        input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    cancelling = client.batches.cancel(batch.id)
    assert cancelling.status == "cancelling"
    done = wait_ended(client, batch.id)
    assert done.status == "cancelled" and done.cancelled_at
    assert done.request_counts.completed < 30
    with pytest.raises(openai.ConflictError):
        client.batches.cancel(batch.id)


def test_an_interactive_call_is_not_held_behind_a_running_batch(client, postgres_stack):
    # Both workers load the model first (the stack's default spec is the stub): a cold worker's
    # first job waits for its load, which is not what is measured here.
    def warm(_):
        content = [{"role": "user", "content": "Say no."}]
        return client.chat.completions.create(model=MODEL, messages=content, max_tokens=1)

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(warm, range(4)))
    lines = [chat_line(f"b{i}", QUESTIONS[i % 5], max_tokens=48) for i in range(24)]
    uploaded = client.files.create(file=("busy.jsonl", jsonl(lines)), purpose="batch")
    batch = client.batches.create(
        input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    deadline = time.monotonic() + 60
    while client.batches.retrieve(batch.id).status == "validating":
        assert time.monotonic() < deadline
        time.sleep(0.2)
    answer = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Say yes."}], max_tokens=4
    )
    job_id = answer.model_extra["pathfinder"]["job_id"]
    job = get(postgres_stack, f"/api/v1/generations/{job_id}").json()
    done = wait_ended(client, batch.id)
    assert done.status == "completed"
    # A free slot took it at once: it waited less than a typical line takes to decode. The
    # median line, not the fastest: a line that ends at its first token decodes in less time
    # (54 ms on the AVX-512 machine, where the median line took 180 ms) than any job takes
    # from the API to a worker's claim (50-90 ms there), held or not.
    lines_decode_ms = []
    for row in client.files.content(done.output_file_id).text.splitlines():
        job_id = json.loads(row)["response"]["body"]["pathfinder"]["job_id"]
        line_job = get(postgres_stack, f"/api/v1/generations/{job_id}").json()
        lines_decode_ms.append(line_job["timings"]["decode_ms"])
    typical_line = statistics.median(lines_decode_ms)
    assert job["timings"]["queue_ms"] < typical_line, (job["timings"], typical_line)


def test_run_batch_follows_a_batch_and_writes_its_files(postgres_stack, tmp_path):
    source = tmp_path / "review.jsonl"
    bad = chat_line("bad", QUESTIONS[1], top_p=7)
    source.write_bytes(jsonl([chat_line("r0", QUESTIONS[3]), bad]).getvalue())
    ran = postgres_stack.manage(
        "run_batch", str(source), "--matter", "system-tests", "--poll", "0.3", timeout=240
    )
    assert ran.returncode == 0, describe(ran)
    summary = json.loads(ran.stdout.strip().splitlines()[-1])
    assert summary["status"] == "completed"
    assert summary["request_counts"] == {"total": 2, "completed": 1, "failed": 1}
    assert "[" + "#" * 30 + "] 2/2 lines" in ran.stderr
    output = [json.loads(x) for x in (tmp_path / "review.output.jsonl").read_text().splitlines()]
    assert [row["custom_id"] for row in output] == ["r0"]
    errors = [json.loads(x) for x in (tmp_path / "review.errors.jsonl").read_text().splitlines()]
    assert errors[0]["response"]["body"]["error"]["param"] == "top_p"

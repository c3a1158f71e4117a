"""The official `openai` client, unchanged, against a live Pathfinder on the real default model:
completions and chat, streamed and not, equal to the native API's output; no streamed chunk
before its record is committed; a client that leaves cancels its job; the cancel endpoint."""

from __future__ import annotations

import json
import time

import openai
import psycopg
import pytest
import requests

from decoding.engine.weights import default_gguf_path

from .helpers import Stack, auth, describe, get, submit, wait_for

pytestmark = [pytest.mark.system, pytest.mark.timeout(300)]

MODEL = "smollm2-135m-instruct"
# The default spec's drafts follow each worker's history (the matter's earlier jobs, the
# acceptance it learnt), and on llama.cpp's batch kernels a different step structure can move a
# near-tie (ADR 0005): two runs of one greedy request on two workers may part there. Where two
# runs are compared token for token, this copy of it with a fixed schedule (context-only drafts,
# the same structure on every worker) is used.
FIXED = "smollm2-fixed"
PROMPT = "Copy this line exactly: The parties agree to keep the terms confidential."
MESSAGES = [{"role": "user", "content": "Name three primary colours, comma separated."}]


@pytest.fixture(scope="module")
def client(postgres_stack) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=f"{postgres_stack.base_url}/v1",
        api_key=postgres_stack.api_key,
        max_retries=0,
        timeout=120,
    )


@pytest.fixture(scope="module")
def fixed_spec(postgres_stack) -> str:
    created = postgres_stack.manage(
        "shell",
        "-c",
        "from decoding.models import ModelSpec; s = ModelSpec.objects.get(name='"
        + MODEL
        + f"'); s.pk = None; s.name = '{FIXED}'; s.draft_schedule = 'fixed'; s.save()",
    )
    assert created.returncode == 0, describe(created)
    return FIXED


@pytest.fixture(scope="module")
def tokenizer():
    """The default model's own tokenizer, to read committed records as text."""
    import llama_cpp

    from decoding.engine.providers.llamacpp import LlamaCppTokenizer

    vocab = llama_cpp.Llama(model_path=str(default_gguf_path()), vocab_only=True, verbose=False)
    return LlamaCppTokenizer(vocab)


def native(stack: Stack, **body) -> dict:
    response = submit(stack, body)
    assert response.status_code == 202, response.text
    return wait_for(stack, response.json()["id"], timeout=120)


def committed_tokens(stack: Stack, job_id: str) -> list[int]:
    """The emitted tokens of the job's committed records, read straight from PostgreSQL."""
    with psycopg.connect(stack.database_url, autocommit=True) as db:
        rows = db.execute(
            """SELECT r.payload FROM audit_decisionrecord r
               JOIN decoding_generationjob j ON j.trail_id = r.trail_id
               WHERE j.id = %s AND r.kind = 'decision' ORDER BY r.seq""",
            [job_id],
        ).fetchall()
    return [token for (payload,) in rows for token in json.loads(payload)["emitted"]]


def verified(stack: Stack, job_id: str) -> bool:
    completed = stack.manage("verify_chain", "--job", job_id)
    assert completed.returncode in (0, 1), describe(completed)
    return completed.returncode == 0


def test_a_completion_equals_the_native_api_output_and_carries_its_audit(
    client, postgres_stack, fixed_spec
):
    params = {"max_tokens": 24, "temperature": 0.0, "seed": 3}
    raw = client.completions.with_raw_response.create(model=fixed_spec, prompt=PROMPT, **params)
    completion = raw.parse()
    job = native(postgres_stack, model=fixed_spec, prompt=PROMPT, **params)

    assert completion.choices[0].text == job["output_text"] != ""
    assert completion.choices[0].finish_reason in ("stop", "length")
    assert completion.usage.completion_tokens == len(job["output_token_ids"])
    audit = completion.model_extra["pathfinder"]
    assert audit["job_id"] == raw.headers["X-Pathfinder-Job"]
    assert audit["status"] == "succeeded" and audit["record_count"] > 0
    assert audit["drafted"] >= audit["accepted"] >= 0
    assert verified(postgres_stack, audit["job_id"])


def test_a_chat_completion_equals_the_native_api_output(client, postgres_stack, fixed_spec):
    params = {"max_tokens": 20, "temperature": 0.0, "seed": 9}
    chat = client.chat.completions.create(model=fixed_spec, messages=MESSAGES, **params)
    job = native(postgres_stack, model=fixed_spec, messages=MESSAGES, **params)
    assert chat.choices[0].message.role == "assistant"
    assert chat.choices[0].message.content == job["output_text"] != ""
    audit = chat.model_extra["pathfinder"]
    own_job = get(postgres_stack, f"/api/v1/generations/{audit['job_id']}").json()
    assert audit["trail_id"] == own_job["trail"]["id"]
    assert audit["head_hash"] == own_job["trail"]["head_hash"]


def test_sampling_with_a_seed_repeats_on_a_fixed_draft_schedule(client, postgres_stack, fixed_spec):
    # The adaptive schedule's drafts follow each worker's history and measured verify cost, and
    # a seed fixes the draws of a given step structure; a fixed schedule makes it repeatable.
    params = {"max_tokens": 24, "temperature": 0.8, "top_p": 0.95, "seed": 11}
    first = client.completions.create(model=fixed_spec, prompt=PROMPT, **params)
    job = native(postgres_stack, model=fixed_spec, prompt=PROMPT, **params)
    streamed = "".join(
        chunk.choices[0].text
        for chunk in client.completions.create(
            model=fixed_spec, prompt=PROMPT, stream=True, **params
        )
        if chunk.choices
    )
    assert first.choices[0].text == job["output_text"] == streamed != ""


@pytest.mark.parametrize("kind", ["completion", "chat"])
def test_no_chunk_arrives_before_its_record_is_committed(client, postgres_stack, tokenizer, kind):
    params = {"model": MODEL, "max_tokens": 48, "temperature": 0.0, "stream": True}
    if kind == "completion":
        call = client.completions.with_streaming_response.create(prompt=PROMPT, **params)
    else:
        call = client.chat.completions.with_streaming_response.create(messages=MESSAGES, **params)
    streamed, chunks, last = "", 0, None
    with call as response:
        job_id = response.headers["X-Pathfinder-Job"]
        for chunk in response.parse():
            if not chunk.choices:
                continue
            choice = chunk.choices[0]
            streamed += (choice.text if kind == "completion" else choice.delta.content) or ""
            # At the moment the chunk arrived, its text was already in committed records.
            committed = tokenizer.decode(committed_tokens(postgres_stack, job_id))
            assert committed.startswith(streamed), (committed, streamed)
            chunks += 1
            last = chunk
    assert chunks > 2  # streamed in pieces, not in one go
    assert last.choices[0].finish_reason in ("stop", "length")
    assert last.model_extra["pathfinder"]["status"] == "succeeded"
    job = wait_for(postgres_stack, job_id)
    assert streamed == job["output_text"]
    assert verified(postgres_stack, job_id)


def test_a_client_that_leaves_a_stream_cancels_its_job(postgres_stack):
    response = requests.post(
        postgres_stack.url("/v1/completions"),
        json={
            "model": MODEL,
            "prompt": PROMPT,
            "max_tokens": 1000,
            "stream": True,
            "ignore_eos": True,
        },  # fmt: skip
        headers=auth(postgres_stack.api_key),
        stream=True,
        timeout=60,
    )
    assert response.status_code == 200
    job_id = response.headers["X-Pathfinder-Job"]
    lines = response.iter_lines()
    assert any(line.startswith(b"data: {") for line in lines)  # the first chunk came
    response.close()

    job = wait_for(postgres_stack, job_id, timeout=60)
    assert (job["status"], job["stop_reason"]) == ("cancelled", "cancelled")
    assert len(job["output_token_ids"]) < 1000
    assert job["output_token_ids"] == committed_tokens(postgres_stack, job_id)
    assert job["trail"]["status"] == "sealed"
    assert verified(postgres_stack, job_id)


def test_the_cancel_endpoint_stops_a_running_job_at_a_step_boundary(postgres_stack):
    body = {"model": MODEL, "prompt": PROMPT, "max_tokens": 1000, "eos_token_id": None}
    created = submit(postgres_stack, body)
    job_id = created.json()["id"]
    deadline = time.monotonic() + 60
    while not committed_tokens(postgres_stack, job_id):  # running, with records committed
        assert time.monotonic() < deadline
        time.sleep(0.05)
    cancelled = requests.post(
        postgres_stack.url(f"/api/v1/generations/{job_id}/cancel"),
        headers=auth(postgres_stack.api_key),
        timeout=30,
    )
    assert cancelled.status_code == 202, cancelled.text
    job = wait_for(postgres_stack, job_id, timeout=60)
    assert (job["status"], job["trail"]["status"]) == ("cancelled", "sealed")
    assert 0 < len(job["output_token_ids"]) < 1000
    assert job["output_token_ids"] == committed_tokens(postgres_stack, job_id)
    listed = get(postgres_stack, "/api/v1/generations?status=cancelled").json()["results"]
    assert job_id in [j["id"] for j in listed]
    assert verified(postgres_stack, job_id)

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

from audit.evidence.sealing import open_decision
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
# An answer that runs to max_tokens, so that a stream has several commits to arrive in.
LONG_MESSAGES = [{"role": "user", "content": "Write a paragraph on the history of contract law."}]


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
    return postgres_stack.copy_spec(MODEL, FIXED, draft_schedule="fixed")


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


def committed_decisions(stack: Stack, job_id: str) -> list[dict]:
    """The job's committed decision records, read straight from PostgreSQL, each opened with the
    slot values stored beside it (audit format 3)."""
    with psycopg.connect(stack.database_url, autocommit=True) as db:
        rows = db.execute(
            """SELECT r.payload, r.openings FROM audit_decisionrecord r
               JOIN decoding_generationjob j ON j.trail_id = r.trail_id
               WHERE j.id = %s AND r.kind = 'decision' ORDER BY r.seq""",
            [job_id],
        ).fetchall()
    return [open_decision(json.loads(p), json.loads(o)) for p, o in rows]


def committed_tokens(stack: Stack, job_id: str) -> list[int]:
    """The emitted tokens of the job's committed records."""
    return [token for record in committed_decisions(stack, job_id) for token in record["emitted"]]


def recorded_logprobs(stack: Stack, job_id: str) -> list[tuple[float, list[tuple[int, float]]]]:
    """Per emitted token: the target's own logprob as its committed record states it, and the
    record's alternatives (token, logprob)."""
    tokens = []
    for record in committed_decisions(stack, job_id):
        tops = record.get("target_top") or []
        for i, logprob in enumerate(record["logprobs"]):
            top = [(alt["token"], float(alt["logprob"])) for alt in (tops[i] if tops else [])]
            tokens.append((float(logprob), top))
    return tokens


@pytest.fixture(scope="module")
def logprobs_spec(postgres_stack) -> str:
    """The default model with a fixed schedule, whose records may keep 5 alternatives."""
    return postgres_stack.copy_spec(
        MODEL, "smollm2-logprobs", draft_schedule="fixed", top_logprobs=5
    )


def test_chat_logprobs_are_the_records_own(client, postgres_stack, logprobs_spec):
    chat = client.chat.completions.create(
        model=logprobs_spec,
        messages=MESSAGES,
        max_tokens=20,
        temperature=0,
        logprobs=True,
        top_logprobs=3,
    )
    content = chat.choices[0].logprobs.content
    recorded = recorded_logprobs(postgres_stack, chat.model_extra["pathfinder"]["job_id"])
    assert len(content) == chat.usage.completion_tokens == len(recorded)
    for entry, (logprob, top) in zip(content, recorded, strict=True):
        assert entry.logprob == logprob
        assert [alt.logprob for alt in entry.top_logprobs] == [lp for _, lp in top]
        assert 1 <= len(entry.top_logprobs) <= 3
        assert entry.top_logprobs[0].token == entry.token  # greedy: the most probable
    assert bytes(b for entry in content for b in entry.bytes).decode() == (
        chat.choices[0].message.content
    )


def test_streamed_logprobs_cover_every_token_once(client, postgres_stack, logprobs_spec):
    stream = client.chat.completions.create(
        model=logprobs_spec,
        messages=MESSAGES,
        max_tokens=32,
        temperature=0.7,
        seed=5,
        logprobs=True,
        top_logprobs=2,
        stream=True,
    )
    content, job_id = [], None
    for chunk in stream:
        if chunk.choices and chunk.choices[0].logprobs is not None:
            content.extend(chunk.choices[0].logprobs.content)
        job_id = (chunk.model_extra.get("pathfinder") or {}).get("job_id") or job_id
    recorded = recorded_logprobs(postgres_stack, job_id)
    assert content and job_id
    assert [entry.logprob for entry in content] == [logprob for logprob, _ in recorded]
    assert all(len(entry.top_logprobs) <= 2 for entry in content)


def test_completion_logprobs_in_the_legacy_shape(client, postgres_stack, logprobs_spec):
    completion = client.completions.create(
        model=logprobs_spec, prompt=PROMPT, max_tokens=16, temperature=0, logprobs=2
    )
    logprobs = completion.choices[0].logprobs
    recorded = recorded_logprobs(postgres_stack, completion.model_extra["pathfinder"]["job_id"])
    assert logprobs.token_logprobs == [logprob for logprob, _ in recorded]
    assert "".join(logprobs.tokens) == completion.choices[0].text
    assert logprobs.text_offset[0] == 0 and all(len(top) <= 2 for top in logprobs.top_logprobs)


def test_top_logprobs_work_on_the_shipped_spec_up_to_openais_bound(client):
    chat = client.chat.completions.create(
        model=MODEL, messages=MESSAGES, max_tokens=4, logprobs=True, top_logprobs=3
    )
    content = chat.choices[0].logprobs.content
    assert content and all(1 <= len(entry.top_logprobs) <= 3 for entry in content)
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(
            model=MODEL, messages=MESSAGES, max_tokens=4, logprobs=True, top_logprobs=21
        )
    assert refused.value.body["param"] == "top_logprobs"


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


def test_the_neutral_values_wrappers_always_send_are_accepted_and_change_nothing(
    client, fixed_spec
):
    """What client wrappers send on every call (zero penalties, an empty bias, one choice, a
    user, stream options, parallel tool calls without tools) is accepted and changes nothing;
    a value that would change the output is refused naming its parameter."""
    params = {"max_tokens": 16, "temperature": 0.0}
    plain = client.chat.completions.create(model=fixed_spec, messages=MESSAGES, **params)
    wrapped = client.chat.completions.create(
        model=fixed_spec,
        messages=MESSAGES,
        presence_penalty=0,
        frequency_penalty=0,
        logit_bias={},
        n=1,
        user="counsel@example.com",
        parallel_tool_calls=False,
        **params,
    )
    assert wrapped.choices[0].message.content == plain.choices[0].message.content != ""
    streamed = client.chat.completions.create(
        model=fixed_spec,
        messages=MESSAGES,
        stream=True,
        stream_options={"include_usage": True},
        presence_penalty=0.0,
        **params,
    )
    text = "".join(c.choices[0].delta.content or "" for c in streamed if c.choices)
    assert text == plain.choices[0].message.content
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(
            model=fixed_spec, messages=MESSAGES, presence_penalty=0.6, **params
        )
    assert refused.value.body["param"] == "presence_penalty"


def test_a_wrong_model_is_refused_with_the_models_served_here(client):
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES, max_tokens=4)
    assert refused.value.body["param"] == "model"
    served = [model.id for model in client.models.list()]
    assert MODEL in served
    assert f"Models served here: {', '.join(served)}." in refused.value.body["message"]


def test_a_seeded_sampled_request_gives_the_same_text_alone_and_among_concurrent_jobs(
    client, postgres_stack
):
    """On the default spec, whose adaptive schedule picks draft lengths from each worker's
    measured cost and load: the same seed gives the same text alone and among 7 concurrent jobs
    (queued at once through the native API, on two workers), streamed or not; another seed
    another text (coupled sampling, ADR 0032)."""
    params = {"max_tokens": 16, "temperature": 0.8, "top_p": 0.95, "seed": 42}
    patient = client.with_options(timeout=600)

    def ask(seed: int = 42) -> str:
        chat = patient.chat.completions.create(
            model=MODEL, messages=LONG_MESSAGES, **{**params, "seed": seed}
        )
        return chat.choices[0].message.content

    alone = ask()
    queued = []
    for _ in range(7):
        response = submit(postgres_stack, {"model": MODEL, "messages": LONG_MESSAGES, **params})
        assert response.status_code == 202, response.text
        queued.append(response.json()["id"])
    together = [wait_for(postgres_stack, job_id, timeout=240)["output_text"] for job_id in queued]
    streamed = "".join(
        c.choices[0].delta.content or ""
        for c in patient.chat.completions.create(
            model=MODEL, messages=LONG_MESSAGES, stream=True, **params
        )
        if c.choices
    )
    assert alone != "" and together == [alone] * 7 and streamed == alone
    assert len({ask(seed) for seed in (1, 2, 3)} | {alone}) == 4


def test_sampling_with_a_seed_repeats_on_a_fixed_draft_schedule(client, postgres_stack, fixed_spec):
    # The completion, the native job and the stream of one seeded request are one text.
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
        call = client.chat.completions.with_streaming_response.create(
            messages=LONG_MESSAGES, **params
        )
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

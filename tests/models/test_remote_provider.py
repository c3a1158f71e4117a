"""The remote provider against a real llama.cpp server (llama-cpp-python[server]) on loopback,
serving the default model: its answers equal the local provider's where it is exact, and it
refuses, with the reason, where it cannot be."""

from __future__ import annotations

import subprocess
import sys
import time

import numpy as np
import pytest
import requests

from decoding.engine import (
    AuditSink,
    FixedSchedule,
    GenerationParams,
    GenerationRequest,
    PromptLookupDrafter,
    SpeculativeDecoder,
)
from decoding.engine.providers.remote import RemoteError, RemoteProvider, params_refusal
from tests.system.helpers import free_port

from .conftest import THREADS

TOP = 10
CHAT = (
    "<|im_start|>user\nQuote: 'the quick brown fox jumps'. Again:<|im_end|>\n"
    "<|im_start|>assistant\n"
)


class Discard(AuditSink):
    def record(self, record) -> None:
        pass


@pytest.fixture(scope="module")
def server(gguf_path, tmp_path_factory):
    """`python -m llama_cpp.server` with prompt log-probabilities on (logits_all)."""
    port = free_port()
    log = tmp_path_factory.mktemp("llama-server") / "server.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "llama_cpp.server", "--model", str(gguf_path),
             "--logits_all", "true", "--n_threads", str(THREADS), "--n_ctx", "2048",
             "--host", "127.0.0.1", "--port", str(port)],
            stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if requests.get(f"{url}/models", timeout=2).status_code == 200:
                    break
            except requests.RequestException:
                pass
            assert process.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=20)


@pytest.fixture(scope="module")
def local(make_llama):
    return make_llama(n_ctx=2048)


@pytest.fixture
def remote(server, local):
    return RemoteProvider(server, tokenizer=local.tokenizer, name="smollm2-remote",
                          top_logprobs=TOP)  # fmt: skip


def log_softmax(logits: np.ndarray) -> np.ndarray:
    shifted = logits - logits.max(axis=1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))


def decode(provider, prompt, **params) -> tuple[int, ...]:
    decoder = SpeculativeDecoder(
        PromptLookupDrafter(provider.vocab_size, min_ngram=3), provider, Discard(),
        tokenizer=provider.tokenizer,
    )  # fmt: skip
    request = GenerationRequest("r", tuple(prompt), GenerationParams(draft_length=4, **params))
    return decoder.generate(request, schedule=FixedSchedule(4)).output_token_ids


def test_the_servers_log_probabilities_are_the_local_models(remote, local):
    prompt = local.tokenizer.encode(CHAT)
    ours, theirs = log_softmax(local.logits(prompt, 4)), remote.logits(prompt, 4)
    assert (theirs.argmax(axis=1) == ours.argmax(axis=1)).all()
    placed = np.isfinite(theirs)
    assert (placed.sum(axis=1) >= TOP - 2).all()  # the top K, less texts several ids share
    assert np.abs(theirs[placed] - ours[placed]).max() < 1e-3


@pytest.mark.parametrize(
    ("prompt", "params"),
    [
        ("The lighthouse keeper climbed the stairs and", {"temperature": 0, "max_tokens": 5}),
        (CHAT, {"temperature": 0, "max_tokens": 8}),
        (CHAT, {"temperature": 0.8, "top_k": 5, "seed": 3, "max_tokens": 12}),
    ],
    ids=["greedy-text", "greedy-chat", "top-k-sampling"],
)
def test_decoding_on_the_server_equals_decoding_locally(remote, local, prompt, params):
    ids = local.tokenizer.encode(prompt)
    expected = decode(local, ids, eos_token_id=None, **params)
    assert decode(remote, ids, eos_token_id=None, **params) == expected
    assert len(expected) == params["max_tokens"]


def test_sampling_beyond_the_returned_log_probabilities_is_refused_with_the_reason(remote, local):
    assert params_refusal(temperature=0, top_k=0, top_logprobs=TOP) is None
    field, reason = params_refusal(temperature=0.7, top_k=0, top_logprobs=TOP)
    assert field == "top_k" and f"top {TOP} log-probabilities" in reason
    field, reason = params_refusal(temperature=0.7, top_k=TOP + 1, top_logprobs=TOP)
    assert field == "top_k" and "exceeds" in reason
    prompt = local.tokenizer.encode(CHAT)
    with pytest.raises(RemoteError, match="top_k"):
        remote.next_distributions(prompt, 1, GenerationParams(temperature=0.7))


def test_a_context_the_server_would_tokenise_differently_fails_closed(remote, local):
    newline = local.tokenizer.encode("\n", add_special=False)
    assert len(newline) == 1 and local.tokenizer.encode("\n\n", add_special=False) != newline * 2
    prompt = local.tokenizer.encode("Hello") + newline * 2  # the server reads "\n\n" as one
    with pytest.raises(RemoteError, match="tokenised the context differently"):
        remote.logits(prompt, 1)


def test_a_server_that_does_not_answer_fails_after_bounded_retries(local):
    dead = RemoteProvider(f"http://127.0.0.1:{free_port()}/v1", tokenizer=local.tokenizer,
                          name="nobody", retries=2, timeout_s=1)  # fmt: skip
    started = time.monotonic()
    with pytest.raises(RemoteError, match="failed 3 times"):
        decode(dead, local.tokenizer.encode("Hello"), temperature=0, max_tokens=3)
    assert time.monotonic() - started < 10

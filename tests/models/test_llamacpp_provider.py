"""LlamaCppProvider on the default model (SmolLM2-135M-Instruct, Q4_1 GGUF)."""

from __future__ import annotations

import hashlib

import jinja2
import numpy as np
import pytest

from .checks import assert_cache_reused_and_truncated, greedy_continuation, separate_calls

PROMPT = "The quick brown fox jumps over the lazy dog. Once upon a time, there was"

# The patched llama.cpp (patches/llama.cpp, ADR 0013) gives a position the same logits however
# the positions around it were batched: one token per call, a 9-position verify, chunks, a
# cached prefix. So these compare with array equality, no tolerance.
EXACT = 0.0


@pytest.fixture
def provider(make_llama):
    return make_llama()


def test_one_call_scores_each_trailing_prefix_as_separate_one_token_calls_do(make_llama):
    separate = make_llama()
    context = greedy_continuation(separate, separate.tokenizer.encode(PROMPT), 8)
    batched = make_llama().logits(context, 9)
    assert batched.shape == (9, separate.vocab_size) and batched.dtype == np.float32
    np.testing.assert_array_equal(batched, separate_calls(separate, context, 9))


def test_the_kv_cache_is_reused_and_truncated_on_divergence(make_llama, provider):
    assert_cache_reused_and_truncated(make_llama, provider.tokenizer.encode(PROMPT), EXACT)


def test_a_prompt_longer_than_a_batch_is_fed_in_chunks(make_llama, provider):
    chunked = make_llama(n_batch=8)
    context = provider.tokenizer.encode(PROMPT)  # 17 tokens: chunks of 8, 8 and 1
    np.testing.assert_array_equal(chunked.logits(context, 10), provider.logits(context, 10))
    assert chunked.tokens_evaluated == len(context)


def test_out_of_range_tokens_are_refused_before_they_reach_llama_cpp(provider):
    with pytest.raises(ValueError, match="token ids"):
        provider.logits([1, 2, provider.vocab_size], 1)


def test_the_tokenizer_round_trips_text(provider):
    tokenizer = provider.tokenizer
    text = "Hello, world! Ça va? 日本語 and tabs\tand\nnewlines"
    ids = tokenizer.encode(text)
    assert tokenizer.decode(ids) == text
    assert "".join(tokenizer.piece(i) for i in tokenizer.encode("Hello, world")) == "Hello, world"
    assert tokenizer.token_to_piece(tokenizer.encode(" world")[0]) == b" world"
    assert tokenizer.vocab_size == provider.vocab_size == 49152
    assert (tokenizer.bos_token_id, tokenizer.eos_token_id) == (1, 2)
    assert tokenizer.piece(2) == "" and tokenizer.token_text(2) == "<|im_end|>"


def test_the_tokenizer_carries_the_chat_template_and_encodes_its_control_tokens(provider):
    tokenizer = provider.tokenizer
    assert tokenizer.chat_template
    rendered = jinja2.Template(tokenizer.chat_template).render(
        messages=[{"role": "user", "content": "Hi"}], add_generation_prompt=True
    )
    ids = tokenizer.encode(rendered)
    assert ids[0] == tokenizer.bos_token_id  # <|im_start|>, one token, not its spelling
    assert tokenizer.eos_token_id in ids  # <|im_end|>
    assert rendered.endswith("<|im_start|>assistant\n")


def test_identity_names_the_weights_by_their_sha256(gguf_path, provider):
    assert provider.identity.sha256 == hashlib.sha256(gguf_path.read_bytes()).hexdigest()
    # and the tokenizer, config and chat template inside the GGUF, each apart
    identity = provider.identity
    template = provider.tokenizer.chat_template
    assert identity.chat_template_sha256 == hashlib.sha256(template.encode()).hexdigest()
    hashes = {identity.tokenizer_sha256, identity.config_sha256, identity.chat_template_sha256}
    assert len(hashes) == 3 and all(len(h) == 64 for h in hashes)
    assert provider.identity.runtime == "llama.cpp"
    assert provider.identity.runtime_version

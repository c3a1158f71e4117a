"""The draft-model path in llama.cpp, on the tiny random Llamas written as GGUF by the test:
the conversion computes the transformers network, greedy speculation equals target greedy,
sampling is exact (chi-square), and a llama.cpp draft serves a transformers target."""

from __future__ import annotations

import numpy as np
import pytest

from decoding.engine import (
    DraftModelDrafter,
    GenerationParams,
    GenerationRequest,
    SpeculativeDecoder,
)
from decoding.engine.providers.llamacpp import LlamaCppProvider
from decoding.engine.providers.transformers_hf import TransformersProvider

from .checks import assert_two_tokens_distributed_as_target_sampling, greedy_continuation
from .conftest import THREADS

PROMPT = (1, 3, 13, 15, 25, 24)  # <s> the big red bird saw, the transformers tests' prompt
# llama.cpp keeps keys and values in float16 (its default KV cache type), transformers in
# float32: the two runtimes' logits of one network differ by ~1e-3 here.
RUNTIME_NOISE = 2e-2


def llama(tiny_ggufs, name: str) -> LlamaCppProvider:
    return LlamaCppProvider(tiny_ggufs[name], name=name, n_threads=THREADS, n_ctx=256)


@pytest.fixture
def target(tiny_ggufs) -> LlamaCppProvider:
    return llama(tiny_ggufs, "tiny4")


@pytest.fixture
def draft(tiny_ggufs) -> LlamaCppProvider:
    return llama(tiny_ggufs, "tiny2")


def test_the_gguf_computes_the_same_network_as_the_transformers_checkpoint(target, tiny_models):
    reference = TransformersProvider(tiny_models["tiny4"], name="tiny4")
    assert target.vocab_size == reference.vocab_size == 30
    assert tuple(reference.tokenizer.encode("the big red bird saw")) == PROMPT
    context = greedy_continuation(reference, PROMPT, 12)
    ours, theirs = target.logits(context, 13), reference.logits(context, 13)
    assert np.abs(ours - theirs).max() <= RUNTIME_NOISE
    top_two = np.sort(theirs, axis=1)[:, -2:]
    clear = top_two[:, 1] - top_two[:, 0] > 2 * RUNTIME_NOISE
    assert clear.sum() >= 10  # the comparison below is not vacuous
    assert (ours.argmax(axis=1) == theirs.argmax(axis=1))[clear].all()


def test_greedy_speculative_decoding_with_a_llamacpp_draft_equals_target_greedy(
    draft, target, tiny_ggufs, sink
):
    params = GenerationParams(max_tokens=40, temperature=0, draft_length=4)
    result = SpeculativeDecoder(DraftModelDrafter(draft), target, sink).generate(
        GenerationRequest("r", PROMPT, params)
    )
    expected = greedy_continuation(llama(tiny_ggufs, "tiny4"), PROMPT, 40)[len(PROMPT) :]
    assert list(result.output_token_ids) == expected
    assert 0 < result.accepted < result.drafted
    assert sink.records[0].payload()["draft"]["runtime"] == "llama.cpp"


def test_a_llamacpp_draft_serves_a_transformers_target(draft, tiny_models, sink):
    target = TransformersProvider(tiny_models["tiny4"], name="tiny4")
    params = GenerationParams(max_tokens=30, temperature=0, draft_length=3)
    result = SpeculativeDecoder(DraftModelDrafter(draft), target, sink).generate(
        GenerationRequest("r", PROMPT, params)
    )
    expected = greedy_continuation(
        TransformersProvider(tiny_models["tiny4"], name="tiny4"), PROMPT, 30
    )[len(PROMPT) :]
    assert list(result.output_token_ids) == expected
    assert result.accepted > 0
    payload = sink.records[0].payload()
    assert (payload["draft"]["runtime"], payload["target"]["runtime"]) == (
        "llama.cpp",
        "transformers",
    )


SEEDS = 2000


def test_sampled_output_is_distributed_exactly_as_target_only_sampling(draft, target, sink):
    decoder = SpeculativeDecoder(DraftModelDrafter(draft), target, sink)
    params = {"temperature": 0.8, "top_k": 8, "top_p": 0.95}
    assert_two_tokens_distributed_as_target_sampling(
        decoder, target, PROMPT, params, SEEDS, sink.records
    )

"""TransformersProvider on tiny random Llamas: the contract, the KV cache, and exact
speculative decoding with a real draft model."""

from __future__ import annotations

import pytest

from decoding.engine import (
    DraftModelDrafter,
    GenerationParams,
    GenerationRequest,
    SpeculativeDecoder,
)
from decoding.engine.providers.transformers_hf import TransformersProvider

from .checks import (
    assert_cache_reused_and_truncated,
    assert_same_decisions,
    assert_two_tokens_distributed_as_target_sampling,
    greedy_continuation,
    separate_calls,
)

PROMPT = "the big red bird saw"  # spread enough that the chi-square tests have ~25 cells
# float32 on CPU: one-token and batch evaluation differ by ~1e-6 here.
KERNEL_NOISE = 1e-4


@pytest.fixture
def make_target(tiny_models):
    return lambda: TransformersProvider(tiny_models["tiny4"], name="tiny4")


@pytest.fixture
def target(make_target) -> TransformersProvider:
    return make_target()


@pytest.fixture
def draft(tiny_models) -> TransformersProvider:
    return TransformersProvider(tiny_models["tiny2"], name="tiny2")


def prompt_ids(provider: TransformersProvider) -> tuple[int, ...]:
    return tuple(provider.tokenizer.encode(PROMPT))


def test_one_call_scores_each_trailing_prefix_as_separate_one_token_calls_do(make_target):
    separate = make_target()
    context = greedy_continuation(separate, prompt_ids(separate), 8)
    batched = make_target().logits(context, 9)
    assert batched.shape == (9, separate.vocab_size)
    assert_same_decisions(batched, separate_calls(separate, context, 9), KERNEL_NOISE)


def test_the_kv_cache_is_reused_and_cropped_on_divergence(make_target, target):
    assert_cache_reused_and_truncated(make_target, list(prompt_ids(target)), KERNEL_NOISE)


def test_the_tokenizer_wraps_the_models_own(target):
    tokenizer = target.tokenizer
    ids = tokenizer.encode(PROMPT)
    assert ids[0] == tokenizer.bos_token_id == 1 and tokenizer.eos_token_id == 2
    assert tokenizer.encode(PROMPT, add_special=False) == ids[1:]
    assert tokenizer.decode(ids) == PROMPT
    assert [tokenizer.piece(i) for i in ids[:3]] == ["", "the", "big"]
    assert tokenizer.token_text(ids[0]) == "<s>"
    assert tokenizer.vocab_size == target.vocab_size == 30
    assert target.identity.runtime == "transformers"
    assert "+torch" in target.identity.runtime_version


def test_greedy_speculative_decoding_with_a_draft_model_equals_target_greedy(
    draft, target, make_target, sink
):
    params = GenerationParams(max_tokens=40, temperature=0, draft_length=4)
    prompt = prompt_ids(target)
    result = SpeculativeDecoder(DraftModelDrafter(draft), target, sink).generate(
        GenerationRequest("r", prompt, params)
    )
    expected = greedy_continuation(make_target(), prompt, 40)[len(prompt) :]
    assert list(result.output_token_ids) == expected
    assert 0 < result.accepted < result.drafted  # the draft was sometimes right, sometimes not


SEEDS = 2000


@pytest.mark.parametrize(
    "params",
    [{"temperature": 1.0, "top_k": 5}, {"temperature": 0.8, "top_p": 0.9}],
    ids=["t1-k5", "t0.8-p0.9"],
)
def test_sampled_output_is_distributed_exactly_as_target_only_sampling(draft, target, sink, params):
    decoder = SpeculativeDecoder(DraftModelDrafter(draft), target, sink)
    assert_two_tokens_distributed_as_target_sampling(
        decoder, target, prompt_ids(target), params, SEEDS, sink.records
    )

"""Invariant 3: speculative decoding changes the speed, never the output distribution (under
speculative sampling and coupled sampling alike)."""

import numpy as np
import pytest
from scipy.stats import chisquare

from decoding.engine import (
    DraftModelDrafter,
    GenerationParams,
    GenerationRequest,
    PromptLookupDrafter,
    SpeculativeDecoder,
    StubProvider,
)
from tests.chisquare import pool_small_cells

PROMPTS = [(1, 2, 3), (5,), (7, 7, 7, 7, 7), (31, 0, 16), (12, 30)]


def target_greedy(target, prompt, max_tokens):
    context = list(prompt)
    for _ in range(max_tokens):
        context.append(int(np.argmax(target.logits(context, 1)[0])))
    return tuple(context[len(prompt) :])


@pytest.mark.parametrize("prompt", PROMPTS)
def test_greedy_output_equals_target_argmax_decoding(decoder, target, prompt):
    params = GenerationParams(max_tokens=40, temperature=0, draft_length=4)
    result = decoder.generate(GenerationRequest("r", prompt, params))
    assert result.output_token_ids == target_greedy(target, prompt, 40)
    assert 0 < result.accepted < result.drafted  # the draft was sometimes right, sometimes not


def test_greedy_output_with_prompt_lookup_equals_target_argmax_decoding(target, sink):
    # The prompt holds the target's own continuation of its first four tokens and ends with
    # them again (the stub is an order-4 Markov model), so lookups hit, then later miss.
    start = (9, 4, 22, 17)
    prompt = (*start, *target_greedy(target, start, 12), *start)
    decoder = SpeculativeDecoder(PromptLookupDrafter(32), target, sink)
    params = GenerationParams(max_tokens=50, temperature=0, draft_length=4)
    result = decoder.generate(GenerationRequest("r", prompt, params))
    assert result.output_token_ids == target_greedy(target, prompt, 50)
    assert sink.records[0].accepted_count == 4
    assert 0 < result.accepted < result.drafted
    assert {record.payload()["draft"]["name"] for record in sink.records} == {"prompt-lookup"}


@pytest.mark.parametrize(
    "params",
    [{}, {"temperature": 0.7, "top_k": 3}, {"temperature": 1.3, "top_p": 0.8}],
    ids=["t1", "t0.7-k3", "t1.3-p0.8"],
)
def test_a_draft_identical_to_the_target_has_every_drafted_token_accepted(target, sink, params):
    decoder = SpeculativeDecoder(DraftModelDrafter(StubProvider(seed=0)), target, sink)
    for seed in range(10):
        request = GenerationRequest(
            "r", (3, 1), GenerationParams(max_tokens=30, seed=seed, **params)
        )
        result = decoder.generate(request)
        assert result.accepted == result.drafted > 0


VOCAB, SEEDS = 5, 6000


def lookup_drafter():
    return PromptLookupDrafter(VOCAB)


def model_drafter():
    draft = StubProvider(vocab_size=VOCAB, seed=0, noise_seed=1, noise=1.0, sharpness=1.0)
    return DraftModelDrafter(draft)


# Prompt lookup proposes from the prompt's repetition: at step 0 "2 4" recurs, so it drafts the
# "1 2" that followed; later steps draft whatever the sampled text repeats, or nothing.
DRAFTERS = {
    "draft-model": (model_drafter, (2, 4)),
    "prompt-lookup": (lookup_drafter, (2, 4, 1, 2, 4)),
}


@pytest.mark.parametrize("coupled", [False, True], ids=["speculative", "coupled"])
@pytest.mark.parametrize("drafter", DRAFTERS)
@pytest.mark.parametrize(
    ("params", "draft_length", "max_tokens"),
    [
        ({"temperature": 1.0}, 2, 3),
        ({"temperature": 0.7, "top_k": 3}, 2, 3),
        ({"temperature": 1.3, "top_p": 0.8}, 2, 3),
        ({"temperature": 1.0}, 1, 2),  # the second token is then a bonus or a plain target draw
    ],
    ids=["t1", "t0.7-k3", "t1.3-p0.8", "t1-bonus"],
)
def test_sampled_output_is_distributed_exactly_as_target_only_sampling(
    sink, drafter, params, draft_length, max_tokens, coupled
):
    make_drafter, prompt = DRAFTERS[drafter]
    target = StubProvider(vocab_size=VOCAB, seed=0, sharpness=1.0)
    decoder = SpeculativeDecoder(make_drafter(), target, sink)

    counts = np.zeros((VOCAB, VOCAB))
    for seed in range(SEEDS):
        run = GenerationParams(
            max_tokens=max_tokens, draft_length=draft_length, seed=seed, **params
        )
        request = GenerationRequest("r", prompt, run, coupled=coupled)
        first, second = decoder.generate(request).output_token_ids[:2]
        counts[first, second] += 1
    assert any(record.accepted_count < record.drafted_count for record in sink.records)
    assert any(0 < record.accepted_count == record.drafted_count for record in sink.records)

    # Exact target-only law of the first two tokens, with the same warping: p(t1) p(t2 | t1).
    warping = GenerationParams(**params)
    p1 = target.next_distributions(prompt, 1, warping)[0]
    joint = np.stack(
        [p1[t] * target.next_distributions((*prompt, t), 1, warping)[0] for t in range(VOCAB)]
    )
    expected = SEEDS * joint.ravel()
    observed = counts.ravel()
    assert observed[expected == 0].sum() == 0  # never a token the warping rules out
    observed, expected = pool_small_cells(observed[expected > 0], expected[expected > 0])
    # Chi-square goodness of fit at significance 0.001. The seeds are fixed, so the outcome is
    # deterministic; a biased rule (e.g. p instead of the residual) fails by orders of magnitude.
    assert chisquare(observed, expected).pvalue > 0.001

"""Invariant 3 on the real default model: greedy speculative decoding (prompt lookup, fixed and
adaptive draft length) equals SmolLM2's own greedy decoding in llama.cpp, token for token.

Verifying k+1 positions in one batch runs other kernels than decoding one token, so a position
whose top two logits are nearly tied may go either way. TOLERANCE is the largest batch-vs-single
logit difference measured here (up to ~0.9 for 9 positions, ARCHITECTURE.md says ~0.4 for
another batch size): a parting is accepted only at a position whose top two logits lie closer
than that, and the test says where it happened.
"""

from __future__ import annotations

import pytest

from decoding.engine import (
    AdaptiveSchedule,
    FixedSchedule,
    GenerationParams,
    GenerationRequest,
    PromptLookupDrafter,
    SpeculativeDecoder,
    measure_verify_cost,
)

from .checks import assert_greedy_equal_but_near_ties

TOLERANCE = 1.0
NEW_TOKENS = 48
PROMPTS = [
    # Extraction and quotation: the answer repeats the context, so prompt lookup hits.
    "<|im_start|>user\nThe Supplier shall deliver 500 units of Product A to the Buyer in Oslo "
    "by 1 March 2027, at a price of 12 euros per unit. Quote the delivery clause word for word."
    "<|im_end|>\n<|im_start|>assistant\n",
    "Repeat after me: the quick brown fox jumps over the lazy dog; the quick brown fox jumps",
    "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n\n\ndef mul(a, b):",
    # Open-ended: few lookups hit; the adaptive schedule should mostly not draft.
    "<|im_start|>user\nWrite a short story about a lighthouse keeper.<|im_end|>\n"
    "<|im_start|>assistant\n",
]


@pytest.fixture(scope="module")
def target(make_llama):
    return make_llama()


@pytest.fixture(scope="module")
def verify_cost(target):
    return measure_verify_cost(target, target.tokenizer.encode(PROMPTS[0], add_special=False))


def speculative_greedy(target, prompt, schedule, sink):
    decoder = SpeculativeDecoder(PromptLookupDrafter(target.vocab_size), target, sink)
    request = GenerationRequest(
        "greedy", tuple(prompt), GenerationParams(max_tokens=NEW_TOKENS, temperature=0.0)
    )
    return decoder.generate(request, schedule=schedule)


@pytest.mark.parametrize("schedule_kind", ["fixed", "adaptive"])
def test_greedy_prompt_lookup_equals_the_targets_own_greedy_decoding(
    target, verify_cost, sink, schedule_kind
):
    partings, accepted = [], 0
    for number, text in enumerate(PROMPTS):
        prompt = target.tokenizer.encode(text, add_special=False)
        schedule = (
            FixedSchedule(8)
            if schedule_kind == "fixed"
            else AdaptiveSchedule(8, verify_cost=verify_cost)
        )
        result = speculative_greedy(target, prompt, schedule, sink)
        parting = assert_greedy_equal_but_near_ties(
            target, prompt, result.output_token_ids, TOLERANCE
        )
        if parting is not None:
            partings.append((number, *parting))
        accepted += result.accepted
    # Shown with -s (and in the report of a failure): where, and how close the tie was.
    for number, position, gap in partings:
        print(f"prompt {number}: parted at token {position}, top-two logit gap {gap:.3f}")
    assert accepted > 0, "prompt lookup never got a drafted token accepted"

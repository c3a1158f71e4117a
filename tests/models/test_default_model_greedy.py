"""Invariant 3 on the real model, bitwise (issue 20 item 4, ADR 0013): speculative decoding with
prompt lookup, fixed and adaptive draft lengths, gives at temperature 0 exactly the tokens of
sequential greedy decoding (one token per llama_decode) with the same build, on every held-out
prompt; with sampling, every recorded p equals, bit for bit, the probability sequential decoding
computes for that token at that position.

This holds because the patched llama.cpp (patches/llama.cpp) computes each position's logits
independently of how many positions a call evaluates; there is no tolerance and no near-tie
exception. The prompts are bench/data/heldout's, written before the kernels they check.
"""

from __future__ import annotations

import pytest

from bench.heldout import prompts as heldout_prompts
from decoding.engine import (
    AdaptiveSchedule,
    FixedSchedule,
    GenerationParams,
    GenerationRequest,
    PromptLookupDrafter,
    SpeculativeDecoder,
    measure_verify_cost,
)

from .checks import greedy_continuation

NEW_TOKENS = 48
SAMPLED = {"temperature": 0.8, "top_p": 0.95, "top_k": 40}


@pytest.fixture(scope="module")
def target(make_llama, served_gguf):
    return make_llama(path=served_gguf, n_ctx=2048)


@pytest.fixture(scope="module")
def held_out(target):
    workloads = heldout_prompts(target.tokenizer)
    return [
        (f"{kind} {number}", prompt)
        for kind in ("extraction", "summary", "open")
        for number, prompt in enumerate(workloads[kind])
    ]


@pytest.fixture(scope="module")
def verify_cost(target, held_out):
    return measure_verify_cost(target, held_out[0][1][:600])


def speculative(target, prompt, schedule, sink, **params):
    decoder = SpeculativeDecoder(PromptLookupDrafter(target.vocab_size), target, sink)
    run = GenerationParams(max_tokens=NEW_TOKENS, **params)
    return decoder.generate(GenerationRequest("r", tuple(prompt), run), schedule=schedule)


def test_greedy_speculative_output_is_sequential_greedy_decoding_token_for_token(
    target, held_out, verify_cost, sink
):
    accepted = 0
    for name, prompt in held_out:
        plain = greedy_continuation(target, prompt, NEW_TOKENS)[len(prompt) :]
        for schedule in (FixedSchedule(8), AdaptiveSchedule(8, verify_cost=verify_cost)):
            result = speculative(target, prompt, schedule, sink, temperature=0.0)
            ours = list(result.output_token_ids)
            assert ours == plain[: len(ours)], f"{name}, {type(schedule).__name__}"
            assert len(ours) == NEW_TOKENS or ours[-1] == target.tokenizer.eos_token_id
            accepted += result.accepted
    assert accepted > 0, "prompt lookup never got a drafted token accepted"


def test_every_recorded_p_is_what_sequential_decoding_computes(target, held_out, sink):
    prompt = held_out[0][1]  # extraction: prompt lookup drafts, so records hold several p each
    params = GenerationParams(max_tokens=NEW_TOKENS, seed=7, **SAMPLED)
    speculative(target, prompt, FixedSchedule(6), sink, seed=7, **SAMPLED)
    assert sum(record.drafted_count for record in sink.records) > 0
    context = list(prompt)
    for record in sink.records:
        verdict = record.verdict
        assert record.context_length == len(context)
        for i in range(verdict.tested):
            alone = target.next_distributions([*context, *verdict.tokens[:i]], 1, params)[0]
            assert alone[verdict.tokens[i]] == verdict.p[i], f"step {record.step} position {i}"
        before = [*context, *verdict.tokens[: verdict.accepted_count]]
        alone = target.next_distributions(before, 1, params)[0]
        assert alone[verdict.correction_token] == verdict.correction_p, f"step {record.step}"
        context.extend(record.emitted)

"""The match-driven schedule on the verify-cost curve a worker measures at load (issue 20 item 5):
with the batch-invariant kernels a verify of a few positions costs little more than one, so a
fresh worker, which has learnt nothing yet, drafts on an obvious copy from its first steps."""

from __future__ import annotations

from decoding.engine import (
    GenerationParams,
    GenerationRequest,
    MatchSchedule,
    MatchStatistics,
    PromptLookupDrafter,
    SpeculativeDecoder,
    measure_verify_cost,
)
from decoding.worker.runtime import CURVE_POSITIONS, curve_context

CLAUSE = (
    "The Supplier shall deliver five hundred units of the Product to the Buyer's warehouse in "
    "Oslo no later than the first of March, and shall bear the cost of carriage and insurance."
)
PROMPT = (
    f"<|im_start|>user\nCopy this clause exactly: {CLAUSE}<|im_end|>\n<|im_start|>assistant\n"
    f"{CLAUSE}<|im_end|>\n<|im_start|>user\nCopy it once more, exactly.<|im_end|>\n"
    "<|im_start|>assistant\n"
)


def test_a_fresh_worker_drafts_an_obvious_copy_from_its_first_steps(make_llama, served_gguf, sink):
    target = make_llama(path=served_gguf)
    curve = measure_verify_cost(target, curve_context(target.tokenizer), CURVE_POSITIONS)

    schedule = MatchSchedule(8, curve, MatchStatistics())  # nothing learnt yet, as at start-up
    decoder = SpeculativeDecoder(PromptLookupDrafter(target.vocab_size), target, sink)
    prompt = tuple(target.tokenizer.encode(PROMPT, add_special=False))
    params = GenerationParams(max_tokens=24, temperature=0.0)
    decoder.generate(GenerationRequest("copy", prompt, params), schedule=schedule)

    first = sink.records[:3]
    assert all(record.drafted_count >= 1 for record in first), [
        record.drafted_count for record in first
    ]
    assert sum(record.accepted_count for record in first) >= 3

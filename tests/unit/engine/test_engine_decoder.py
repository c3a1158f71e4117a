"""The speculative loop: hand-built cases through the decoder, stopping, budgets, failure."""

import numpy as np
import pytest

from decoding.engine import (
    AuditUnavailable,
    DraftModelDrafter,
    GenerationParams,
    GenerationRequest,
    SpeculativeDecoder,
    StubProvider,
    uniform,
)
from decoding.engine.sampling import sample

PROMPT = (0,)  # length one: the fake tables are keyed by prefix length 1, 2, 3...


def one_hot(token):
    return np.eye(4)[token]


@pytest.fixture
def decode(table_decoder):
    def run(draft_rows, target_rows, **params):
        decoder = table_decoder(draft_rows, target_rows)
        return decoder.generate(GenerationRequest("req", PROMPT, GenerationParams(**params)))

    return run


def first_seed(predicate):
    return next(seed for seed in range(1000) if predicate(seed))


def test_a_fully_accepted_draft_earns_a_bonus_token_from_the_target(decode, sink):
    rows = {1: one_hot(2), 2: one_hot(1)}
    result = decode(rows, {**rows, 3: one_hot(3)}, max_tokens=3, draft_length=2)
    assert result.output_token_ids == (2, 1, 3)
    (record,) = sink.records
    assert (record.accepted_count, record.verdict.correction_kind) == (2, "bonus")
    assert result.acceptance_rate == 1.0 and result.mean_accepted_length == 2.0


def test_a_rejected_token_is_replaced_by_a_draw_from_the_residual_distribution(decode, sink):
    # The draft proposes token 0 (q = 0.5) where the target gives it no mass: always rejected.
    # The residual max(0, p - q) leaves only token 2, although p alone could also give token 1.
    seed = first_seed(lambda s: uniform(s, 0, 0, "draft") < 0.5)
    draft_rows = {1: [0.5, 0.5, 0, 0]}
    target_rows = {1: [0, 0.5, 0.5, 0], 2: one_hot(3)}
    result = decode(draft_rows, target_rows, max_tokens=2, draft_length=1, seed=seed)
    assert result.output_token_ids == (2, 3)
    first = sink.records[0].payload()
    assert first["drafted"][0]["token"] == 0 and first["drafted"][0]["accepted"] is False
    assert first["correction"] == {
        "token": 2,
        "kind": "residual",
        "u": repr(uniform(seed, 0, 0, "residual")),
        "p": "0.5",
    }


def test_a_drafted_token_the_target_rates_as_highly_is_accepted(decode):
    seed = first_seed(lambda s: uniform(s, 0, 0, "draft") >= 0.5)  # the draft proposes token 1
    result = decode(
        {1: [0.5, 0.5, 0, 0]}, {1: [0, 0.5, 0.5, 0], 2: one_hot(3)}, max_tokens=2, seed=seed
    )
    assert result.output_token_ids == (1, 3)
    assert result.accepted == 1


def test_it_keeps_the_accepted_prefix_and_resamples_at_the_first_rejection(decode, sink):
    draft_rows = {1: one_hot(1), 2: one_hot(2), 3: one_hot(0)}
    target_rows = {1: one_hot(1), 2: one_hot(2), 3: [0, 0.25, 0, 0.75]}
    decode(draft_rows, target_rows, max_tokens=4, draft_length=3, seed=5)
    correction = sample(np.array([0, 0.25, 0, 0.75]), uniform(5, 0, 2, "residual"))
    assert sink.records[0].emitted == (1, 2, correction)
    payload = sink.records[0].payload()
    assert [d["accepted"] for d in payload["drafted"]] == [True, True, False]
    assert payload["accepted_count"] == 2
    assert payload["correction"]["kind"] == "residual"


def test_end_of_sequence_stops_generation_and_is_the_last_output_token(decoder, sink):
    prompt = (1, 2, 3)
    free = decoder.generate(GenerationRequest("free", prompt, GenerationParams(max_tokens=30)))
    eos = free.output_token_ids[10]
    params = GenerationParams(max_tokens=30, eos_token_id=eos)
    result = decoder.generate(GenerationRequest("eos", prompt, params))
    assert result.output_token_ids == free.output_token_ids[: free.output_token_ids.index(eos) + 1]
    assert result.stop_reason == "eos"
    assert sink.records[-1].payload()["stop"] == "eos"


def test_accepted_tokens_after_end_of_sequence_are_not_emitted(decode, sink):
    rows = {1: one_hot(1), 2: one_hot(3), 3: one_hot(2)}
    result = decode(rows, rows, max_tokens=8, draft_length=3, eos_token_id=3)
    assert result.output_token_ids == (1, 3)
    (record,) = sink.records
    assert record.emitted == (1, 3) and record.accepted_count == 3
    assert "only 2 of the 4 tokens were emitted" in record.payload()["rationale"]


@pytest.mark.parametrize("max_tokens", [1, 2, 5, 6, 13])
def test_the_draft_length_is_clamped_so_the_output_never_exceeds_max_tokens(
    decoder, sink, max_tokens
):
    params = GenerationParams(max_tokens=max_tokens, draft_length=4, seed=3)
    result = decoder.generate(GenerationRequest("r", (4, 5), params))
    assert len(result.output_token_ids) == max_tokens
    assert result.stop_reason == "max_tokens"
    produced = 0
    for record in sink.records:
        payload = record.payload()
        assert payload["draft_length"] == min(4, max_tokens - produced - 1)
        produced += len(record.emitted)


def test_a_draft_that_always_agrees_fills_the_budget_then_drafts_nothing(target, sink):
    decoder = SpeculativeDecoder(DraftModelDrafter(StubProvider(seed=0)), target, sink)
    params = GenerationParams(max_tokens=6, draft_length=4)
    result = decoder.generate(GenerationRequest("r", (1,), params))
    assert [r.payload()["draft_length"] for r in sink.records] == [4, 0]
    assert [len(r.emitted) for r in sink.records] == [5, 1]
    assert len(result.output_token_ids) == 6


def test_a_single_token_request_is_one_target_call_and_nothing_drafted(decoder, sink):
    result = decoder.generate(GenerationRequest("r", (7,), GenerationParams(max_tokens=1)))
    assert len(result.output_token_ids) == 1
    assert (result.steps, result.drafted, result.acceptance_rate) == (1, 0, 0.0)
    payload = sink.records[0].payload()
    assert payload["draft_length"] == 0 and payload["drafted"] == []
    assert payload["correction"]["kind"] == "bonus"


def test_a_prompt_of_length_one_is_decoded(decoder):
    result = decoder.generate(GenerationRequest("r", (7,), GenerationParams(max_tokens=12)))
    assert len(result.output_token_ids) == 12
    assert result.records_written == result.steps


def test_a_second_run_of_the_same_request_replays_every_field_but_the_timings(decoder, sink):
    request = GenerationRequest("r", (1, 2), GenerationParams(max_tokens=24, seed=11))
    first = decoder.generate(request)
    first_payloads = [r.payload() for r in sink.records]
    sink.records.clear()
    second = decoder.generate(request)
    second_payloads = [r.payload() for r in sink.records]
    for payload in first_payloads + second_payloads:
        del payload["timings_us"]
    assert first.output_token_ids == second.output_token_ids
    assert first_payloads == second_payloads


def test_different_seeds_give_different_decisions(decoder):
    outputs = {
        decoder.generate(
            GenerationRequest("r", (1, 2), GenerationParams(max_tokens=24, seed=seed))
        ).output_token_ids
        for seed in range(5)
    }
    assert len(outputs) == 5


def test_it_fails_closed_when_the_audit_sink_cannot_commit(draft_model, target, failing_sink):
    sink = failing_sink
    decoder = SpeculativeDecoder(DraftModelDrafter(draft_model), target, sink)
    released = []
    with pytest.raises(AuditUnavailable) as failure:
        decoder.generate(
            GenerationRequest("r", (1, 2), GenerationParams(max_tokens=40)),
            on_step=released.append,
        )
    assert isinstance(failure.value.__cause__, OSError)
    assert released == sink.records and len(released) == 2
    streamed = [token for record in released for token in record.emitted]
    assert streamed == [t for p in (r.payload() for r in sink.records) for t in p["emitted"]]


def test_it_refuses_a_drafter_whose_vocabulary_differs_from_the_target(target, sink):
    with pytest.raises(ValueError, match="vocabulary"):
        SpeculativeDecoder(DraftModelDrafter(StubProvider(vocab_size=16)), target, sink)


def test_it_refuses_prompt_tokens_outside_the_vocabulary(decoder):
    with pytest.raises(ValueError, match="prompt_token_ids"):
        decoder.generate(GenerationRequest("r", (1, 32), GenerationParams()))

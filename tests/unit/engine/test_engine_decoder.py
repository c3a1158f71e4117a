"""The speculative loop: hand-built cases through the decoder, stopping, budgets, failure."""

import time

import numpy as np
import pytest

from decoding.engine import (
    AdaptiveSchedule,
    AuditSink,
    AuditUnavailable,
    DraftModelDrafter,
    DraftSchedule,
    GenerationParams,
    GenerationRequest,
    Provider,
    SpeculativeDecoder,
    StubProvider,
    uniform,
)
from decoding.engine.decoder import STEP_PARTS
from decoding.engine.sampling import sample
from tests.unit.engine.conftest import CountingProvider, FakeTokenizer, TableProvider

PROMPT = (0,)  # length one: the fake tables are keyed by prefix length 1, 2, 3...


def one_hot(token):
    return np.eye(4)[token]


@pytest.fixture
def decode(table_decoder):
    def run(draft_rows, target_rows, stop=None, **params):
        decoder = table_decoder(draft_rows, target_rows)
        request = GenerationRequest("req", PROMPT, GenerationParams(**params))
        return decoder.generate(request, stop=stop)

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


def test_a_prompt_of_length_one_is_decoded(decoder, sink):
    result = decoder.generate(GenerationRequest("r", (7,), GenerationParams(max_tokens=12)))
    assert len(result.output_token_ids) == 12
    assert len(sink.records) == result.steps


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
    with pytest.raises(AuditUnavailable) as failure:
        decoder.generate(GenerationRequest("r", (1, 2), GenerationParams(max_tokens=40)))
    assert isinstance(failure.value.__cause__, OSError)
    assert len(sink.records) == 2  # nothing decided after the refused record


class BatchingSink(AuditSink):
    """Holds records until flush(), like TrailSink; `committed` is what a reader of the store
    would see. Raises on the flush number `fail_on`."""

    def __init__(self, fail_on: int | None = None):
        self.held: list = []
        self.committed: list = []
        self.flushes = 0
        self._fail_on = fail_on

    def record(self, record):
        self.held.append(record)

    def flush(self):
        self.flushes += 1
        if self.flushes == self._fail_on:
            raise OSError("could not write")
        self.committed.extend(self.held)
        self.held.clear()


def test_without_a_listener_a_sink_may_batch_and_everything_is_committed_before_the_result(
    draft_model, target
):
    sink = BatchingSink()
    decoder = SpeculativeDecoder(DraftModelDrafter(draft_model), target, sink)
    result = decoder.generate(GenerationRequest("r", (1, 2), GenerationParams(max_tokens=40)))
    assert result.steps > 1
    assert sink.flushes == 1 and sink.held == []
    assert [t for r in sink.committed for t in r.emitted] == list(result.output_token_ids)


def test_a_cancelled_request_stops_at_a_step_boundary_with_what_was_recorded(draft_model, target):
    sink = BatchingSink()
    decoder = SpeculativeDecoder(DraftModelDrafter(draft_model), target, sink)
    asked = []

    def cancelled():
        asked.append(len(sink.held) + len(sink.committed))
        return len(asked) > 3

    result = decoder.generate(
        GenerationRequest("r", (1, 2), GenerationParams(max_tokens=200)), cancelled=cancelled
    )
    assert result.stop_reason == "cancelled"
    assert result.steps == 3 == len(sink.committed) and sink.held == []
    assert asked == [0, 1, 2, 3]  # before every step, never inside one
    assert [t for r in sink.committed for t in r.emitted] == list(result.output_token_ids)
    assert [(r.drafted_count, r.accepted_count) for r in sink.committed] == list(result.step_counts)


def test_a_failed_flush_fails_closed_and_releases_nothing_it_held(draft_model, target):
    sink = BatchingSink(fail_on=1)
    decoder = SpeculativeDecoder(DraftModelDrafter(draft_model), target, sink)
    with pytest.raises(AuditUnavailable) as failure:
        decoder.generate(GenerationRequest("r", (1, 2), GenerationParams(max_tokens=40)))
    assert isinstance(failure.value.__cause__, OSError)
    assert sink.committed == []


def test_it_refuses_a_drafter_whose_vocabulary_differs_from_the_target(target, sink):
    with pytest.raises(ValueError, match="vocabulary"):
        SpeculativeDecoder(DraftModelDrafter(StubProvider(vocab_size=16)), target, sink)


def test_it_refuses_prompt_tokens_outside_the_vocabulary(decoder):
    with pytest.raises(ValueError, match="prompt_token_ids"):
        decoder.generate(GenerationRequest("r", (1, 32), GenerationParams()))


class ScriptedSchedule(DraftSchedule):
    """Drafts the lengths it is given, in turn, and remembers what it was told."""

    def __init__(self, lengths):
        self.lengths = list(lengths)
        self.asked = []
        self.observed = []

    def next_length(self, max_length):
        self.asked.append(max_length)
        return self.lengths[len(self.asked) - 1]

    def observe(self, drafted, accepted):
        self.observed.append((drafted, accepted))


def test_each_record_drafts_the_length_the_schedule_chose_within_the_budget(decoder, sink):
    schedule = ScriptedSchedule([3, 0, 4, 1, 4, 4])
    params = GenerationParams(max_tokens=12, draft_length=4, seed=2)
    result = decoder.generate(GenerationRequest("r", (1, 2), params), schedule=schedule)
    produced, expected = 0, []
    for record, length in zip(sink.records, schedule.lengths, strict=False):
        expected.append(min(length, params.max_tokens - produced - 1))
        produced += len(record.emitted)
    assert [r.payload()["draft_length"] for r in sink.records] == expected
    assert expected[:2] == [3, 0]
    assert set(schedule.asked) == {4}  # the request's draft_length is the schedule's limit
    assert schedule.observed == [(r.drafted_count, r.accepted_count) for r in sink.records]
    assert len(result.output_token_ids) == 12


def test_an_adaptive_schedule_lengthens_the_draft_while_every_token_is_accepted(target, sink):
    decoder = SpeculativeDecoder(DraftModelDrafter(StubProvider(seed=0)), target, sink)
    schedule = AdaptiveSchedule(8, {1: 8.0, 9: 34.0, 17: 63.0})
    params = GenerationParams(max_tokens=80, draft_length=6)
    decoder.generate(GenerationRequest("r", (1,), params), schedule=schedule)
    lengths = [r.payload()["draft_length"] for r in sink.records][:-1]  # the last is clamped
    assert lengths == sorted(lengths)  # every draft was accepted, so it never shrank
    assert lengths[0] < 6 and lengths[-1] == max(lengths) == 6


def test_a_schedule_asking_for_more_than_the_request_allows_is_refused(decoder):
    with pytest.raises(ValueError, match="schedule"):
        decoder.generate(
            GenerationRequest("r", (1,), GenerationParams(draft_length=2)),
            schedule=ScriptedSchedule([3]),
        )


def test_the_stop_condition_ends_generation_after_the_step_that_met_it(decoder, sink):
    seen = []

    def stop(tokens):
        seen.append(tuple(tokens))
        return len(tokens) >= 7

    params = GenerationParams(max_tokens=40, draft_length=3, seed=4)
    result = decoder.generate(GenerationRequest("r", (1, 2), params), stop=stop)
    assert result.stop_reason == "stop"
    assert 7 <= len(result.output_token_ids) < 7 + 4
    assert [r.stop for r in sink.records] == [None] * (len(sink.records) - 1) + ["stop"]
    # It was asked once per step, with all output so far, the step's own tokens included.
    outputs = [tuple(t for r in sink.records[: i + 1] for t in r.emitted) for i in range(len(seen))]
    assert seen == outputs
    payload = sink.records[-1].payload()
    assert payload["stop"] == "stop"
    assert "caller's stop condition" in payload["rationale"]


def test_end_of_sequence_outranks_the_stop_condition_which_outranks_the_token_limit(decode):
    rows = {1: one_hot(1), 2: one_hot(3), 3: one_hot(2)}

    def always(tokens):
        return True

    eos = decode(rows, rows, max_tokens=8, draft_length=3, eos_token_id=3, stop=always)
    assert eos.stop_reason == "eos"
    # A stop string completed by the last allowed token is a stop, as OpenAI's API reports it.
    assert decode(rows, rows, max_tokens=1, stop=always).stop_reason == "stop"
    never = decode(rows, rows, max_tokens=2, stop=lambda tokens: False)
    assert never.stop_reason == "max_tokens"


class SlowSink(AuditSink):
    SECONDS = 0.002

    def __init__(self, sink):
        self._sink = sink

    def record(self, record):
        time.sleep(self.SECONDS)
        self._sink.record(record)


def test_prefill_is_timed_apart_and_happens_once_per_provider_before_any_step(sink):
    calls = []
    draft = CountingProvider(calls, seed=0, noise_seed=1, noise=0.5, name="draft")
    target = CountingProvider(calls, seed=0, name="target")
    decoder = SpeculativeDecoder(DraftModelDrafter(draft), target, SlowSink(sink))
    params = GenerationParams(max_tokens=20, seed=1)
    result = decoder.generate(GenerationRequest("r", (3, 4, 5), params))
    prefills = [call for call in calls if call[1] == "prefill"]
    assert prefills == [("draft", "prefill", (3, 4, 5)), ("target", "prefill", (3, 4, 5))]
    assert calls[:2] == prefills
    assert result.prefill_ns >= 0
    assert result.audit_ns >= result.steps * SlowSink.SECONDS * 1e9
    assert result.decode_ns > result.audit_ns


def test_with_a_tokenizer_each_token_in_the_record_carries_its_text(draft_model, target, sink):
    decoder = SpeculativeDecoder(
        DraftModelDrafter(draft_model), target, sink, tokenizer=FakeTokenizer()
    )
    decoder.generate(GenerationRequest("r", (1, 2), GenerationParams(max_tokens=30, seed=3)))
    piece = FakeTokenizer().piece
    for record in sink.records:
        payload = record.payload()
        assert all(d["text"] == piece(d["token"]) for d in payload["drafted"])
        assert payload["correction"]["text"] == piece(payload["correction"]["token"])
        assert payload["emitted_text"] == [piece(t) for t in payload["emitted"]]


def test_the_text_of_tokens_cut_after_end_of_sequence_is_not_emitted_either(sink):
    rows = {1: one_hot(1), 2: one_hot(3), 3: one_hot(2)}
    drafter = DraftModelDrafter(TableProvider(rows, name="draft"))
    decoder = SpeculativeDecoder(
        drafter, TableProvider(rows, name="target"), sink, tokenizer=FakeTokenizer()
    )
    params = GenerationParams(max_tokens=8, draft_length=3, eos_token_id=3)
    decoder.generate(GenerationRequest("r", PROMPT, params))
    payload = sink.records[0].payload()
    assert [d["text"] for d in payload["drafted"]] == ["<1>", "<3>", "<2>"]
    assert payload["emitted_text"] == ["<1>", "<3>"]


class SlowTarget(Provider):
    """A target whose pass takes a known time, beside a sink that takes another."""

    SECONDS = 0.003

    def __init__(self, inner):
        self._inner = inner
        self.identity, self.vocab_size = inner.identity, inner.vocab_size

    def logits(self, context, num_positions):
        time.sleep(self.SECONDS)
        return self._inner.logits(context, num_positions)


def test_each_part_of_a_step_is_timed_where_it_happens_and_the_parts_add_up(sink):
    draft = StubProvider(seed=0, noise_seed=1, noise=0.5, name="draft")
    target = SlowTarget(StubProvider(seed=0, name="target"))
    decoder = SpeculativeDecoder(DraftModelDrafter(draft), target, SlowSink(sink))
    result = decoder.generate(GenerationRequest("r", (3, 4, 5), GenerationParams(max_tokens=20)))
    parts = dict(result.parts_ns)
    assert list(parts) == list(STEP_PARTS)
    assert parts["model"] >= result.steps * SlowTarget.SECONDS * 1e9
    assert parts["audit"] >= result.steps * SlowSink.SECONDS * 1e9
    assert parts["audit"] == result.audit_ns
    assert all(parts[part] > 0 for part in ("drafter", "scores", "rule", "record"))
    assert parts["scores"] < parts["model"]  # the pass's sleep is not counted as scores
    assert sum(parts.values()) <= result.decode_ns

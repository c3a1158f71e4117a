"""The audit payload: its exact shape, and nothing in it another language could read otherwise."""

import re

import pytest

from audit.evidence.binding import emitted_from
from decoding.engine import (
    DraftModelDrafter,
    GenerationParams,
    GenerationRequest,
    PromptLookupDrafter,
    SpeculativeDecoder,
)
from decoding.engine.sampling import log_softmax
from tests.unit.engine.conftest import FakeTokenizer

KEYS = {
    "v",
    "kind",
    "request_id",
    "step",
    "rule",
    "draft",
    "target",
    "params",
    "context_length",
    "draft_length",
    "drafted",
    "draft_source",
    "accepted_count",
    "correction",
    "emitted",
    "logprobs",
    "stop",
    "rationale",
    "timings_us",
}


def walk(value):
    yield value
    if isinstance(value, dict):
        assert all(type(key) is str for key in value)
        for item in value.values():
            yield from walk(item)
    elif isinstance(value, list):
        for item in value:
            yield from walk(item)


@pytest.fixture(params=[1.0, 0.0], ids=["sampling", "greedy"])
def payloads(request, decoder, sink):
    params = GenerationParams(max_tokens=30, temperature=request.param, top_p=0.9, eos_token_id=5)
    decoder.generate(GenerationRequest("req-7", (1, 2, 3), params))
    return [record.payload() for record in sink.records]


def test_the_payload_has_exactly_the_documented_keys(payloads):
    for payload in payloads:
        assert set(payload) == KEYS
        assert set(payload["params"]) == {
            "max_tokens",
            "temperature",
            "top_k",
            "top_p",
            "seed",
            "draft_length",
            "eos_token_id",
        }
        assert set(payload["draft"]) == {
            "name",
            "revision",
            "sha256",
            "runtime",
            "runtime_version",
            "tokenizer_sha256",
            "config_sha256",
            "chat_template_sha256",
            "converted_sha256",
            "source_sha256",
            "file_type",
        }
        assert set(payload["correction"]) == {"token", "kind", "u", "p"}
        assert set(payload["timings_us"]) == {"draft", "verify"}
        for drafted in payload["drafted"]:
            assert set(drafted) == {"token", "q", "p", "ratio", "u", "accepted"}


def test_each_emitted_tokens_logprob_is_the_targets_own_whatever_the_sampling(target, sink):
    """At the model card's sampling (temperature 0.2, top-p 0.9) many chosen tokens have a
    warped p of 1, whose log is 0; their logprob is the model's own log-softmax instead, which a
    reviewer can recompute from the target at the record's context."""
    params = GenerationParams(max_tokens=24, temperature=0.2, top_p=0.9)
    decoder = SpeculativeDecoder(PromptLookupDrafter(target.vocab_size), target, sink)
    context = [1, 2, 3, 1, 2, 3]
    decoder.generate(GenerationRequest("r", tuple(context), params))
    flattened = []
    for record in sink.records:
        payload = record.payload()
        emitted = payload["emitted"]
        own = log_softmax(target.logits(context + emitted[:-1], len(emitted)))
        assert payload["logprobs"] == [repr(float(own[i, t])) for i, t in enumerate(emitted)]
        flattened += [
            float(logprob)
            for token, logprob in zip(emitted_from(payload), payload["logprobs"], strict=True)
            if token.p == "1.0"
        ]
        context += emitted
    assert flattened and all(value < 0 for value in flattened), flattened


def test_the_payload_holds_no_float_and_only_exactly_representable_integers(payloads):
    for value in walk(payloads):
        assert type(value) in (str, int, bool, type(None), list, dict), value
        if type(value) is int:
            assert abs(value) <= 2**53 - 1


def test_the_rationale_is_one_sentence(payloads):
    for payload in payloads:
        rationale = payload["rationale"]
        assert rationale[0].isupper() and rationale.endswith(".")
        assert not re.search(r"[.!?]\s", rationale) and "\n" not in rationale


def test_steps_follow_each_other_over_the_growing_context(payloads):
    context_length = 3
    for step, payload in enumerate(payloads):
        assert (payload["step"], payload["context_length"]) == (step, context_length)
        assert payload["draft_length"] == len(payload["drafted"])
        context_length += len(payload["emitted"])


def test_a_reviewer_can_rederive_every_sampling_decision_from_the_record(decoder, sink):
    decoder.generate(GenerationRequest("r", (1, 2, 3), GenerationParams(max_tokens=40)))
    payloads = [record.payload() for record in sink.records]
    assert any(p["accepted_count"] < p["draft_length"] for p in payloads)  # rejections happened
    for payload in payloads:
        assert payload["rule"] == "speculative-sampling"
        tested = min(payload["accepted_count"] + 1, payload["draft_length"])
        for i, drafted in enumerate(payload["drafted"]):
            assert float(drafted["ratio"]) == float(drafted["p"]) / float(drafted["q"])
            if i < tested:
                decision = float(drafted["u"]) < min(1.0, float(drafted["ratio"]))
                assert drafted["accepted"] is decision
            else:  # after the first rejection nothing was decided, so nothing was drawn
                assert drafted["u"] is None and drafted["accepted"] is False
        assert payload["correction"]["u"] is not None


def test_greedy_records_carry_no_ratio_and_no_draw(decoder, sink):
    params = GenerationParams(max_tokens=20, temperature=0)
    decoder.generate(GenerationRequest("r", (1, 2, 3), params))
    for record in sink.records:
        payload = record.payload()
        assert payload["rule"] == "greedy-argmax"
        assert all(d["ratio"] is None and d["u"] is None for d in payload["drafted"])
        assert payload["correction"]["u"] is None
        assert payload["correction"]["kind"] in {"argmax", "argmax-bonus"}


def test_the_emitted_tokens_are_the_accepted_prefix_then_the_correction(payloads):
    for payload in payloads:
        accepted = [d["token"] for d in payload["drafted"][: payload["accepted_count"]]]
        kept = [*accepted, payload["correction"]["token"]]
        assert payload["emitted"] == kept[: len(payload["emitted"])]
        assert payload["emitted"] == kept or payload["stop"] == "eos"


@pytest.fixture
def text_payloads(draft_model, target, sink):
    """Sampling and greedy runs spelled by a tokenizer, one ending at end-of-sequence."""
    decoder = SpeculativeDecoder(
        DraftModelDrafter(draft_model), target, sink, tokenizer=FakeTokenizer()
    )
    for temperature in (1.0, 0.0):
        params = GenerationParams(max_tokens=30, temperature=temperature, eos_token_id=7)
        decoder.generate(GenerationRequest("req", (1, 2, 3), params))
    return [record.payload() for record in sink.records]


def test_with_a_tokenizer_the_payload_spells_every_token_it_names(text_payloads):
    piece = FakeTokenizer().piece
    assert any(payload["stop"] == "eos" for payload in text_payloads)
    for payload in text_payloads:
        assert set(payload) == KEYS | {"emitted_text"}
        assert set(payload["correction"]) == {"token", "kind", "u", "p", "text"}
        for drafted in payload["drafted"]:
            assert set(drafted) == {"token", "q", "p", "ratio", "u", "accepted", "text"}
            assert drafted["text"] == piece(drafted["token"])
        assert payload["correction"]["text"] == piece(payload["correction"]["token"])
        assert payload["emitted_text"] == [piece(token) for token in payload["emitted"]]


def test_with_a_tokenizer_the_payload_still_holds_no_float(text_payloads):
    for value in walk(text_payloads):
        assert type(value) in (str, int, bool, type(None), list, dict), value


def test_a_stop_by_the_callers_condition_is_recorded_and_explained(decoder, sink):
    params = GenerationParams(max_tokens=30)
    decoder.generate(GenerationRequest("r", (1, 2), params), stop=lambda tokens: len(tokens) > 3)
    payload = sink.records[-1].payload()
    assert payload["stop"] == "stop"
    assert payload["rationale"].endswith(
        "generation stopped because the caller's stop condition was met."
    )


def test_a_prompt_lookup_record_shows_one_hot_q_and_ratio_equal_to_p(target, sink):
    decoder = SpeculativeDecoder(PromptLookupDrafter(32), target, sink)
    params = GenerationParams(max_tokens=40, seed=1)
    decoder.generate(GenerationRequest("r", (5, 6, 7, 5, 6, 7, 5, 6), params))
    drafted = [d for record in sink.records for d in record.payload()["drafted"]]
    assert drafted
    for entry in drafted:
        assert entry["q"] == "1.0" and entry["ratio"] == entry["p"]

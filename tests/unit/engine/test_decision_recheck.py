"""audit.evidence.decision_rule against the engine: every record the engine writes passes the
re-check,
and each lie an outside examiner had a dishonest service sign (issue 22) fails it. The edits
were written before the rule; each names the field a forger would touch."""

from __future__ import annotations

import copy

import pytest

from audit.evidence.decision_rule import DecisionRule
from audit.evidence.decision_rule import uniform as verifier_uniform
from decoding.engine import (
    DraftModelDrafter,
    GenerationParams,
    GenerationRequest,
    PromptLookupDrafter,
    SpeculativeDecoder,
    StubProvider,
)
from decoding.engine.rng import uniform as engine_uniform
from tests.system.helpers import REPO_ROOT
from tests.unit.engine.conftest import MemorySink

PROMPT = (1, 2, 3, 4, 1, 2, 3, 4, 1, 2)  # repeats, so prompt lookup finds copies


def honest_trail(
    drafter_kind: str, temperature: float, max_tokens: int = 24, eos=None, prompt=PROMPT
):
    """(request payload, decision payloads) of one real generation by the engine."""
    sink = MemorySink()
    target = StubProvider(seed=0, name="stub-target", vocab_size=8)
    if drafter_kind == "lookup":
        drafter = PromptLookupDrafter(8)
    else:
        drafter = DraftModelDrafter(
            StubProvider(seed=0, noise_seed=1, noise=0.5, name="stub-draft", vocab_size=8)
        )
    params = GenerationParams(
        max_tokens=max_tokens, temperature=temperature, top_p=0.9, eos_token_id=eos, draft_length=4
    )
    SpeculativeDecoder(drafter, target, sink).generate(GenerationRequest("job-1", prompt, params))
    decisions = [record.payload() for record in sink.records]
    request = {
        "job": "job-1",
        "models": {"draft": decisions[0]["draft"], "target": decisions[0]["target"]},
        "params": {**decisions[0]["params"], "stop": [], "stream": False},
        "prompt": {"token_count": len(prompt)},
    }
    return request, decisions


def failures(request, decisions) -> list[str]:
    rule = DecisionRule(request)
    return [f"step {d.get('step')}: {r}" for d in decisions for r in rule.check(d)]


KINDS = [("model", 1.0), ("model", 0.0), ("lookup", 1.0), ("lookup", 0.0)]


@pytest.mark.parametrize(("drafter", "temperature"), KINDS)
def test_every_record_the_engine_writes_passes(drafter, temperature):
    for max_tokens, eos in ((24, None), (5, None), (40, 3)):
        request, decisions = honest_trail(drafter, temperature, max_tokens, eos)
        assert failures(request, decisions) == [], (drafter, temperature, max_tokens, eos)
        assert any(d["draft_length"] for d in decisions)


def first(decisions, test):
    return next(d for d in decisions if test(d))


def sampled():
    return honest_trail("model", 1.0)


def rejected(d):
    return d["accepted_count"] < d["draft_length"]


def edit_u(decisions):
    d = first(decisions, lambda d: d["draft_length"])
    d["drafted"][0]["u"] = "0.5"


def edit_ratio(decisions):
    d = first(decisions, lambda d: d["draft_length"])
    d["drafted"][0]["ratio"] = "0.999"


def flip_acceptance(decisions):
    d = first(decisions, rejected)
    n = d["accepted_count"]
    d["drafted"][n]["accepted"] = True
    d["accepted_count"] = n + 1


def bonus_after_rejection(decisions):
    first(decisions, rejected)["correction"]["kind"] = "bonus"


def wrong_correction_draw(decisions):
    d = first(decisions, lambda d: True)
    d["correction"]["u"] = "0.25"


def emitted_beyond_prefix(decisions):
    d = first(decisions, rejected)
    d["emitted"] = [t["token"] for t in d["drafted"]] + [d["correction"]["token"]]


def more_than_max_tokens(decisions):
    decisions[-1]["emitted"] = [*decisions[-1]["emitted"], 0]


def stop_moved_early(decisions):
    decisions[0]["stop"] = "max_tokens"


def a_decision_dropped(decisions):
    del decisions[1]
    for step, d in enumerate(decisions):
        d["step"] = step


def other_target(decisions):
    decisions[0]["target"] = {**decisions[0]["target"], "sha256": "f" * 64}


def other_params(decisions):
    decisions[0]["params"] = {**decisions[0]["params"], "temperature": "0.5"}


def rule_switched(decisions):
    decisions[0]["rule"] = "greedy-argmax"


def draft_too_long(decisions):
    decisions[-1]["draft_length"] += 1


def a_logprob_above_zero(decisions):
    decisions[0]["logprobs"][0] = "0.5"  # a probability above 1


def a_logprob_missing(decisions):
    decisions[0]["logprobs"] = decisions[0]["logprobs"][:-1]


# Issue 40's signed gaps: what a record shows beside its tokens, held to them (written before
# the rule checked any of it).
def texts_short_of_the_tokens(decisions):
    decisions[0]["emitted_text"] = [" the"] * (len(decisions[0]["emitted"]) - 1)


def a_negative_timing(decisions):
    decisions[0]["timings_us"] = {"draft": 0, "verify": -5}


def top_alternatives_short_of_the_tokens(decisions):
    decisions[0]["target_top"] = []


def a_top_alternative_above_probability_one(decisions):
    decisions[0]["target_top"] = [[{"token": t, "logprob": "0.5"}] for t in decisions[0]["emitted"]]


LIES = {
    "a wrong accept draw u": edit_u,
    "a ratio that is not p/q": edit_ratio,
    "an acceptance that contradicts u < min(1, ratio)": flip_acceptance,
    "a bonus after a rejection": bonus_after_rejection,
    "a correction drawn with another u": wrong_correction_draw,
    "emitted tokens beyond the accepted prefix": emitted_beyond_prefix,
    "more tokens than max_tokens": more_than_max_tokens,
    "a stop before the budget is spent": stop_moved_early,
    "a decision dropped, the steps renumbered": a_decision_dropped,
    "another target model than the request's": other_target,
    "other params than the request's": other_params,
    "greedy claimed at temperature 1": rule_switched,
    "a draft_length that is not the drafted count": draft_too_long,
    "a log-probability above 0": a_logprob_above_zero,
    "a log-probability short of the emitted tokens": a_logprob_missing,
    "emitted_text short of the emitted tokens": texts_short_of_the_tokens,
    "a negative timing": a_negative_timing,
    "target_top short of the emitted tokens": top_alternatives_short_of_the_tokens,
    "a top alternative above probability one": a_top_alternative_above_probability_one,
}


@pytest.mark.parametrize("lie", LIES)
def test_each_lie_a_dishonest_service_signs_is_caught(lie):
    request, decisions = sampled()
    assert failures(request, decisions) == []
    lied = copy.deepcopy(decisions)
    LIES[lie](lied)
    found = failures(request, lied)
    assert found, lie
    assert not any("format's shape" in f for f in found), found  # named, not a crash


def test_a_false_draft_source_is_caught():
    request, decisions = honest_trail("lookup", 1.0)
    copied = first(decisions, lambda d: d["draft_source"])
    for source in (
        None,  # a copy that names no source
        {**copied["draft_source"], "offset": copied["context_length"]},  # past the context
        {**copied["draft_source"], "match_length": 0},
    ):
        lied = copy.deepcopy(decisions)
        first(lied, lambda d: d["step"] == copied["step"])["draft_source"] = source
        assert failures(request, lied), source
    lied = copy.deepcopy(decisions)
    first(lied, lambda d: d["step"] == copied["step"])["drafted"][0]["q"] = "0.5"
    assert failures(request, lied)  # a copy's q is one-hot


def test_greedy_lies_are_caught():
    request, decisions = honest_trail("model", 0.0)
    lied = copy.deepcopy(decisions)
    d = first(lied, rejected)
    d["correction"]["token"] = d["drafted"][d["accepted_count"]]["token"]  # "replaced" by itself
    d["emitted"][-1] = d["correction"]["token"]
    assert failures(request, lied)
    lied = copy.deepcopy(decisions)
    first(lied, lambda d: not rejected(d))["correction"]["kind"] = "argmax"
    assert failures(request, lied)  # a full acceptance ends with argmax-bonus


def test_the_doc_s_rng_example_is_what_both_implementations_draw():
    doc = (REPO_ROOT / "docs" / "audit-format.md").read_text("utf-8")
    drawn = engine_uniform(42, 0, 0, "accept")
    assert drawn == verifier_uniform(42, 0, 0, "accept")
    assert f'`uniform(42, 0, 0, "accept")` is `{drawn!r}`' in doc


APERIODIC = (6, 1, 2, 3, 7, 0, 5, 1, 2, 3)  # "1 2 3" recurs, the rest does not


def test_with_the_prompt_disclosed_a_copied_draft_is_read_back_from_the_context():
    request, decisions = honest_trail("lookup", 1.0, prompt=APERIODIC)
    disclosed = DecisionRule(request, prompt_ids=list(APERIODIC))
    assert [r for d in decisions for r in disclosed.check(d)] == []
    assert disclosed.unchecked == set()
    withheld = DecisionRule(request)
    assert [r for d in decisions for r in withheld.check(d)] == []
    assert any("withheld" in why for why in withheld.unchecked)
    # A source that names another place of the context, in bounds, with the same match length:
    # only reading the context back catches it.
    copied = first(decisions, lambda d: d["draft_source"] and d["draft_source"]["offset"] > 1)
    offset = copied["draft_source"]["offset"]
    context = [
        *APERIODIC,
        *(t for d in decisions if d["step"] < copied["step"] for t in d["emitted"]),
    ]
    false_length = next(  # a match length the context does not bear out
        n for n in range(1, offset + 1) if context[offset - n : offset] != context[-n:]
    )
    for lie in ({"offset": offset - 1}, {"match_length": false_length}):
        lied = copy.deepcopy(decisions)
        d = first(lied, lambda d: d["step"] == copied["step"])
        d["draft_source"] = {**d["draft_source"], **lie}
        rule = DecisionRule(request, prompt_ids=list(APERIODIC))
        assert [r for d in lied for r in rule.check(d)], lie

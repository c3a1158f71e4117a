"""audit.evidence.sealing, format 4 (ADR 0026): a decision's workings sealed whole. Written
before the code: sealed, a record shows only its CLEAR_KEYS, and no number the engine computed
from the context; opened, it is exactly the engine's record and the rule re-checks it as
before, a forged one included; sealed, the rule names what it did not re-check and judges only
what is in clear; a forged or foreign opening is named."""

import json
from pathlib import Path

import pytest

from audit.evidence import binding, sealing
from audit.evidence.chain import canonical_json
from audit.evidence.decision_rule import DecisionRule

SALT = "a7" * 32
VECTORS = json.loads((Path(__file__).parents[2] / "data" / "rng_vectors.json").read_text("utf-8"))
DECISIONS = VECTORS["decisions"]  # a sampled trail's decisions, as the engine wrote them


def sealed_all():
    return [sealing.seal_decision(d, SALT, 4) for d in DECISIONS]


def numbers_of(value) -> set[str]:
    """Every decimal string a clear record holds (p, q, ratio, u, logprobs, ...)."""
    if isinstance(value, dict):
        return set().union(*(numbers_of(v) for v in value.values()))
    if isinstance(value, list):
        return set().union(*(numbers_of(v) for v in value)) if value else set()
    if isinstance(value, str) and value.replace(".", "", 1).replace("e-", "").isdigit():
        return {value}
    return set()


def test_a_sealed_record_shows_only_its_clear_keys_and_no_computed_number():
    for clear, (sealed, values) in zip(DECISIONS, sealed_all(), strict=True):
        assert set(sealed) == {*sealing.CLEAR_KEYS, sealing.WORKINGS} & {*clear, "workings"}
        assert sealed["v"] == 4 and list(values) == [f"step.{clear['step']}.workings"]
        computed = numbers_of({k: v for k, v in clear.items() if k not in sealing.CLEAR_KEYS})
        shown = canonical_json(sealed)
        assert computed and not any(f'"{n}"' in shown for n in computed)


def test_opening_the_workings_gives_back_the_engine_s_record_exactly():
    for clear, (sealed, values) in zip(DECISIONS, sealed_all(), strict=True):
        opened = sealing.open_decision(sealed, values)
        assert canonical_json(opened) == canonical_json({**clear, "v": 4})


def test_every_opened_decision_is_re_checked_and_a_forged_one_caught():
    rule = DecisionRule(None)
    for sealed, values in sealed_all():
        assert rule.check(sealing.open_decision(sealed, values)) == []
    clear = DECISIONS[0]
    forged = {**clear, "drafted": [{**d, "accepted": True} for d in clear["drafted"]]}
    forged["accepted_count"] = len(forged["drafted"])
    sealed, values = sealing.seal_decision(forged, SALT, 4)
    assert DecisionRule(None).check(sealing.open_decision(sealed, values))


def test_a_sealed_decision_is_named_not_re_checked_and_its_clear_keys_still_judged():
    rule = DecisionRule(None)
    for sealed, _ in sealed_all():
        assert rule.check(sealing.open_decision(sealed, {})) == []
    assert any("workings are sealed" in why for why in rule.unchecked)
    sealed, _ = sealed_all()[0]
    greedy_rule = {**sealed, "rule": "greedy-argmax"}  # its sampled temperature says otherwise
    assert any("temperature" in r for r in DecisionRule(None).check(greedy_rule))


def openings(values, salt=SALT):
    return {n: {"salt": sealing.slot_salt(salt, n), "value": v} for n, v in values.items()}


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (lambda o, n: {**o, n: {**o[n], "value": {**o[n]["value"], "rationale": "."}}}, "not the"),
        (lambda o, n: {**o, n: {**o[n], "salt": sealing.slot_salt("d4" * 32, n)}}, "not the one"),
        (lambda o, n: {**o, n: {**o[n], "value": {"token": 1}}}, "workings slot opens to"),
        (lambda o, n: {**o, "step.0.drafted.0": o[n]}, "commits to no such slot"),
    ],
)
def test_a_bad_opening_is_named(change, expected):
    sealed, values = sealed_all()[0]
    name = next(iter(values))
    named = [r for _, r in sealing.opening_failures(sealed, change(openings(values), name))]
    assert any(expected in r for r in named), named


def test_a_format_4_record_that_keeps_its_workings_in_clear_is_named():
    sealed, values = sealed_all()[0]
    leaky = {**sealed, "context_length": values[next(iter(values))]["context_length"]}
    assert "in clear (context_length)" in sealing.shape_problem(leaky)
    contents = binding.Contents("t", 4)
    contents.observe(0, None)
    contents.observe(1, {**leaky, "kind": "decision"})
    assert any("format 4's shape" in f.reason for f in contents.failures)


def test_a_format_4_request_states_no_prompt_length():
    assert "token_count" not in request_record()["prompt"]
    assert request_record(format_version=3)["prompt"]["token_count"] == 3
    stated = request_record()
    stated["prompt"]["token_count"] = 3
    contents = binding.Contents("t", 4)
    contents.observe(0, stated)
    assert any("token_count" in f.reason for f in contents.failures)


def test_verify_chain_s_walk_opens_every_format_4_decision_and_re_checks_it():
    """As audit.verification walks a trail: each decision stored sealed, its workings beside
    it. The rule re-checks all of them (nothing unchecked for want of an opening), with the
    prompt's length taken from the first decision (format 4 states none)."""
    contents = binding.Contents("t", 4, trail_salt=SALT)
    contents.observe(0, request_record())
    for seq, clear in enumerate(DECISIONS, start=1):
        sealed, values = sealing.seal_decision({**clear, "request_id": "j"}, SALT, 4)
        contents.observe(seq, sealed, stored_values=values)
    assert contents.failures == [] and contents.sealed_decisions == 0
    assert contents.unchecked == {
        "the first decision's context_length against the prompt's length (the prompt's token "
        "ids are not disclosed)"
    }
    forged = {**DECISIONS[1], "request_id": "j"}
    forged["context_length"] += 1
    contents = binding.Contents("t", 4, trail_salt=SALT)
    contents.observe(0, request_record())
    for seq, clear in enumerate([{**DECISIONS[0], "request_id": "j"}, forged], start=1):
        sealed, values = sealing.seal_decision(clear, SALT, 4)
        contents.observe(seq, sealed, stored_values=values)
    assert any("context_length" in f.reason for f in contents.failures)


def request_record(format_version: int = 4) -> dict:
    """The request record of a three-token prompt, with the decision vectors' models and
    params."""
    question = binding.Question("prompt_token_ids", [1, 2, 3], "", (1, 2, 3), {})
    params = DECISIONS[0]["params"]
    payload = binding.request_payload(
        trail_salt=SALT,
        job_id="j",
        matter="m",
        request_id=None,
        attempt=1,
        previous_trail=None,
        model_spec="s",
        models={"draft": DECISIONS[0]["draft"], "target": DECISIONS[0]["target"]},
        question=question,
        format_version=format_version,
    )
    return {**payload, "params": {**params, "stop": [], "stream": False}}


def test_a_job_row_is_held_to_the_first_decision_s_context_length():
    """Format 4 states no prompt length, so verify_chain holds the job row's prompt (bound by
    its digests) to the first opened decision's context_length instead."""
    contents = binding.Contents("t", 4, trail_salt=SALT)
    contents.observe(0, request_record())
    sealed, values = sealing.seal_decision({**DECISIONS[0], "request_id": "j"}, SALT, 4)
    contents.observe(1, sealed, stored_values=values)
    prompt = contents.first_context
    for ids, named in ((tuple(range(prompt)), False), (tuple(range(prompt + 1)), True)):
        question = binding.Question("prompt_token_ids", list(ids), "", ids, {})
        claim = binding.Claim("j", "t", 1, "m", None, "s", question, None)
        reasons = [f.reason for f in binding.claim_failures(claim, contents, SALT)]
        assert any("context_length" in r for r in reasons) is named, reasons

"""audit.evidence.sealing (audit format 3): a decision's tokens as salted commitments. Written
before the code: opening every slot gives back exactly what the engine wrote; a bundle that
opens none still lets the rule re-check every accept and reject; a forged opening, a slot
opened twice over or a token left in clear is named."""

import json
from pathlib import Path

import pytest

from audit.evidence import binding, sealing
from audit.evidence.chain import canonical_json
from audit.evidence.decision_rule import DecisionRule

SALT = "c3" * 32
VECTORS = json.loads((Path(__file__).parents[2] / "data" / "rng_vectors.json").read_text("utf-8"))
DECISIONS = VECTORS["decisions"]  # a sampled trail's decisions, as the engine wrote them


def sealed_all():
    return [sealing.seal_decision(d, SALT) for d in DECISIONS]


def test_opening_every_slot_gives_back_the_engine_s_record_exactly():
    for clear, (sealed, values) in zip(DECISIONS, sealed_all(), strict=True):
        assert canonical_json(sealing.open_decision(sealed, values)) == canonical_json(clear)


def test_a_sealed_record_carries_no_token_and_no_text():
    for clear, (sealed, _) in zip(DECISIONS, sealed_all(), strict=True):
        text = canonical_json(sealed)
        assert '"token"' not in text and '"text"' not in text and '"emitted"' not in text
        for entry in clear.get("drafted", []):
            assert entry.get("text") is None or json.dumps(entry["text"])[1:-1] not in text


def test_every_decision_is_re_checked_with_no_slot_opened():
    """What an examiner holds from a bundle that withholds both texts: the numbers alone."""
    rule = DecisionRule(None)
    for sealed, _ in sealed_all():
        opened = sealing.open_decision(sealed, {})
        assert all(t is None for t in opened["emitted"])
        assert rule.check(opened) == [], sealed["step"]


def test_a_forged_accept_is_still_caught_with_every_slot_sealed():
    sealed, _ = sealed_all()[0]
    forged = {**sealed, "drafted": [{**d, "accepted": True} for d in sealed["drafted"]]}
    forged["accepted_count"] = len(forged["drafted"])
    failures = DecisionRule(None).check(sealing.open_decision(forged, {}))
    assert failures  # the draws and ratios, in clear, contradict it


def openings(sealed, values, salt=SALT):
    return {n: {"salt": sealing.slot_salt(salt, n), "value": v} for n, v in values.items()}


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (lambda o, n: {**o, n: {**o[n], "value": {"token": 999999}}}, "not the one the record"),
        (lambda o, n: {**o, n: {**o[n], "salt": sealing.slot_salt("d4" * 32, n)}}, "not the one"),
        (lambda o, n: {**o, n: {**o[n], "value": {"token": -1}}}, "opens to {token}"),
        (lambda o, n: {**o, n: {**o[n], "salt": "zz"}}, "salt is not hex"),
        (lambda o, n: {**o, "step.0.drafted.99": o[n]}, "commits to no such slot"),
    ],
)
def test_a_bad_opening_is_named(change, expected):
    sealed, values = sealed_all()[0]
    name = sorted(values)[0]
    named = [r for _, r in sealing.opening_failures(sealed, change(openings(sealed, values), name))]
    assert any(expected in r for r in named), named


def test_a_record_that_keeps_a_token_in_clear_is_not_format_3():
    sealed, _ = sealed_all()[0]
    leaky = {**sealed, "drafted": [{**sealed["drafted"][0], "token": 5}, *sealed["drafted"][1:]]}
    assert "in clear" in sealing.shape_problem(leaky)
    contents = binding.Contents("t", 3)
    contents.observe(0, None)  # no request: only the decision's own shape is judged
    contents.observe(1, {**leaky, "kind": "decision", "v": 3})
    assert any("format 3's shape" in f.reason for f in contents.failures)


def test_salts_differ_per_slot_so_one_opening_proves_nothing_about_another():
    sealed, values = sealed_all()[0]
    names = sorted(values)
    assert len({sealing.slot_salt(SALT, n) for n in names}) == len(names)
    same_token = {"token": 1}
    assert sealing.commitment(sealing.slot_salt(SALT, names[0]), same_token) != (
        sealing.commitment(sealing.slot_salt(SALT, names[1]), same_token)
    )


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (lambda s: {**s, "emitted_count": s["accepted_count"] + 2}, "more than the"),
        (lambda s: {**s, "target_top": s.get("target_top", [])[:-1] or ["0" * 64] * 9}, "one"),
    ],
)
def test_counts_a_sealed_record_signs_are_held_to_its_tokens(change, expected):
    """Issue 40: an emitted_count above the accepted prefix and the correction was silently cut
    short on opening, and a target_top of another length than the emitted tokens went
    unchecked; both are now the record's shape, named before anything is opened."""
    sealed, _ = sealed_all()[0]
    assert sealing.shape_problem(sealed) is None
    assert expected in sealing.shape_problem(change(sealed))

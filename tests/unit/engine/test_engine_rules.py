"""The verification rules on hand-built distributions whose outcome is known by hand."""

import numpy as np
import pytest
from scipy.stats import binomtest

from decoding.engine import Draft
from decoding.engine.rules import verify_greedy, verify_sampling


def draft(tokens, q):
    return Draft(tokens=np.array(tokens, dtype=np.int64), q=np.array(q, dtype=float))


def test_greedy_accepts_drafted_tokens_while_they_match_the_target_argmax():
    proposal = draft([1, 2, 0], [[0, 1, 0], [0, 0, 1], [1, 0, 0]])
    p = np.array([[0.1, 0.6, 0.3], [0.2, 0.2, 0.6], [0.1, 0.5, 0.4], [1, 0, 0]])
    verdict = verify_greedy(proposal, p)
    assert verdict.rule == "greedy-argmax"
    assert verdict.accepted_count == 2
    assert (verdict.correction_token, verdict.correction_kind) == (1, "argmax")
    assert verdict.correction_p == 0.5
    assert verdict.ratio is None and verdict.u is None


def test_greedy_adds_the_target_argmax_as_a_bonus_when_everything_matches():
    proposal = draft([1], [[0.4, 0.6]])
    verdict = verify_greedy(proposal, np.array([[0.3, 0.7], [0.9, 0.1]]))
    assert verdict.accepted_count == 1
    assert (verdict.correction_token, verdict.correction_kind) == (0, "argmax-bonus")


def test_sampling_accepts_everything_where_the_target_agrees_and_adds_a_bonus_from_p():
    proposal = draft([0, 1], [[1, 0, 0], [0, 1, 0]])
    p = np.array([[1, 0, 0], [0, 1, 0], [0, 0, 1]])
    verdict = verify_sampling(proposal, p, seed=0, step=0)
    assert verdict.rule == "speculative-sampling"
    assert verdict.accepted_count == 2
    assert (verdict.correction_token, verdict.correction_kind) == (2, "bonus")
    assert verdict.ratio.tolist() == [1.0, 1.0]


def test_sampling_rejects_a_token_the_target_never_picks_and_resamples_from_the_residual():
    # p - q is positive only at token 2, although p alone could also give token 1.
    proposal = draft([0], [[0.5, 0.5, 0, 0]])
    p = np.array([[0, 0.5, 0.5, 0], [0.25, 0.25, 0.25, 0.25]])
    verdict = verify_sampling(proposal, p, seed=0, step=0)
    assert verdict.accepted_count == 0
    assert (verdict.correction_token, verdict.correction_kind) == (2, "residual")
    assert verdict.correction_p == 0.5
    assert verdict.ratio.tolist() == [0.0]


# q(0) = 0.8 and q(1) = 0.2 against p(0) = 0.2 and p(1) = 0.1: ratios 0.25 and 0.5, and the
# residual max(0, p - q) has mass only at token 2.
Q = [[0.8, 0.2, 0.0, 0.0]]
P = np.array([[0.2, 0.1, 0.7, 0.0], [0.25, 0.25, 0.25, 0.25]])


@pytest.mark.parametrize(("token", "ratio"), [(0, 0.25), (1, 0.5)])
def test_sampling_accepts_with_probability_p_over_q_over_4000_draws(token, ratio):
    draws = 4000
    verdicts = [verify_sampling(draft([token], Q), P, seed=1, step=s) for s in range(draws)]
    accepted = sum(v.accepted_count for v in verdicts)
    # Binomial test at significance 0.001: the draws are fixed, so this never flakes.
    assert binomtest(accepted, draws, ratio).pvalue > 0.001
    assert {v.correction_token for v in verdicts if v.accepted_count == 0} == {2}


def test_sampling_always_accepts_a_token_the_target_likes_more_than_the_draft():
    proposal = draft([2], [[0.6, 0.3, 0.1, 0.0]])
    for step in range(200):
        assert verify_sampling(proposal, P, seed=0, step=step).accepted_count == 1


def test_sampling_refuses_a_drafted_token_its_own_q_rules_out():
    with pytest.raises(ValueError, match="q"):
        verify_sampling(draft([3], Q), P, seed=0, step=0)

"""Prompt lookup: copy what followed the latest earlier occurrence of the context's last tokens."""

import hashlib

import numpy as np
import pytest

from decoding.engine import (
    ENGINE_VERSION,
    GenerationParams,
    PromptLookupDrafter,
    SpeculativeDecoder,
)

PARAMS = GenerationParams()


def propose(context, k=3, **ngrams):
    drafter = PromptLookupDrafter(32, **ngrams)
    return drafter.propose(context, k, PARAMS, seed=0, step=0).tokens.tolist()


def test_it_proposes_what_followed_the_latest_match_of_the_context_tail():
    context = [1, 2, 3, 9, 1, 2, 3, 7, 5, 1, 2, 3]
    assert propose(context, k=3) == [7, 5, 1]
    assert propose(context, k=1) == [7]


def test_a_longer_match_wins_over_a_more_recent_shorter_one():
    context = [4, 2, 3, 8, 5, 3, 6, 4, 2, 3]  # "4 2 3" once at the start; "3" later, before 6
    assert propose(context, k=2) == [8, 5]
    assert propose(context, k=2, max_ngram=1) == [6, 4]


def test_it_proposes_nothing_when_no_earlier_ngram_matches():
    assert propose([1, 2, 3, 4]) == []
    assert propose([5]) == []
    # "6" recurs, but a match must be at least min_ngram tokens long.
    assert propose([5, 6, 9, 1, 6], min_ngram=2) == []
    assert propose([5, 6, 9, 1, 6], min_ngram=1) == [9, 1, 6]


def test_it_proposes_fewer_than_k_where_the_continuation_runs_out():
    assert propose([1, 2, 1], k=4) == [2, 1]
    assert propose([7, 7, 7, 7], k=4) == [7]  # overlapping matches count


def test_it_proposes_nothing_when_asked_for_nothing():
    assert propose([1, 2, 1, 2], k=0) == []


def test_its_q_is_one_hot_on_each_proposed_token():
    drafter = PromptLookupDrafter(32)
    draft = drafter.propose([1, 2, 3, 1, 2], 3, PARAMS, seed=0, step=0)
    assert draft.tokens.tolist() == [3, 1, 2]
    assert draft.q_of_tokens().tolist() == [1.0, 1.0, 1.0]
    rows = np.stack([draft.q_row(i) for i in range(3)])
    assert rows.shape == (3, 32) and rows.dtype == np.float64
    assert np.array_equal(rows, np.eye(32)[draft.tokens])  # one 1.0 a row, zeros elsewhere
    assert np.array_equal(draft.prefix(2).q_row(1), rows[1])
    empty = drafter.propose([1, 2, 3], 3, PARAMS, seed=0, step=0)
    assert empty.tokens.shape == (0,) and len(empty.q_of_tokens()) == 0


def test_it_names_itself_by_its_ngram_range():
    identity = PromptLookupDrafter(32, min_ngram=2, max_ngram=4).identity
    assert identity.name == "prompt-lookup"
    assert identity.revision == "ngram 2-4"
    assert identity.sha256 == hashlib.sha256(b"ngram 2-4").hexdigest()
    assert (identity.runtime, identity.runtime_version) == ("pathfinder", ENGINE_VERSION)


def test_its_proposals_depend_only_on_the_context_not_on_earlier_calls():
    rng = np.random.default_rng(3)
    text = rng.integers(0, 4, 300).tolist()
    shared = PromptLookupDrafter(32)
    contexts = [text[:n] for n in range(1, 300, 7)] + [text[50:120], text[:40], text[:41]]
    for context in contexts:
        fresh = PromptLookupDrafter(32)
        expected = fresh.propose(context, 5, PARAMS, seed=0, step=0).tokens.tolist()
        assert shared.propose(context, 5, PARAMS, seed=0, step=0).tokens.tolist() == expected


def test_it_matches_a_plain_scan_on_random_contexts():
    def plain(context, k, lo, hi):
        for n in range(hi, lo - 1, -1):
            tail = context[len(context) - n :]
            for start in range(len(context) - n - 1, -1, -1):
                if len(context) > n and context[start : start + n] == tail:
                    return context[start + n : start + n + k]
        return []

    rng = np.random.default_rng(0)
    for _ in range(300):
        context = rng.integers(0, 5, rng.integers(1, 40)).tolist()
        lo = int(rng.integers(1, 3))
        hi = lo + int(rng.integers(0, 3))
        assert propose(context, k=4, min_ngram=lo, max_ngram=hi) == plain(context, 4, lo, hi)


@pytest.mark.parametrize(
    "ngrams", [{"min_ngram": 0}, {"min_ngram": 3, "max_ngram": 2}], ids=["zero", "inverted"]
)
def test_it_refuses_an_empty_or_inverted_ngram_range(ngrams):
    with pytest.raises(ValueError, match="ngram"):
        PromptLookupDrafter(32, **ngrams)


def test_its_vocabulary_is_checked_against_the_target_like_any_drafter(target, sink):
    with pytest.raises(ValueError, match="vocabulary"):
        SpeculativeDecoder(PromptLookupDrafter(16), target, sink)

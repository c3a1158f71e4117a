"""A step's scores read only what the step needs, with the bits the whole-row computation gives.

Written before the lazy scores (issue 42 item 2): the reference here is the computation every
recorded run so far was made with, a dense (rows, vocab) p and log-softmax from formulas spelt
out in full, and every value a record holds (decisions, p, logprobs, top logprobs) must come out
of the new scores bit for bit, or old trails would no longer replay.
"""

import numpy as np
import pytest

from decoding.engine import Draft, GenerationParams
from decoding.engine.providers.base import Scores
from decoding.engine.rules import verify_greedy, verify_sampling
from decoding.engine.sampling import sample

VOCAB = 49152


def dense_p(logits: np.ndarray, params: GenerationParams) -> np.ndarray:
    """p as every run before issue 42 made it: float64, temperature, top-k, softmax, top-p."""
    z = np.array(logits, dtype=np.float64)
    if params.is_greedy:
        shifted = z - z.max(axis=-1, keepdims=True)
        return np.exp(shifted) / np.exp(shifted).sum(axis=-1, keepdims=True)
    z = z / params.temperature
    if 0 < params.top_k < z.shape[-1]:
        order = np.argsort(-z, axis=-1, kind="stable")
        ranks = np.empty_like(order)
        np.put_along_axis(ranks, order, np.arange(z.shape[-1])[None, :], axis=-1)
        z[ranks >= params.top_k] = -np.inf
    shifted = z - z.max(axis=-1, keepdims=True)
    p = np.exp(shifted) / np.exp(shifted).sum(axis=-1, keepdims=True)
    if params.top_p < 1:
        kept = np.zeros_like(p)
        for row, out in zip(p, kept, strict=True):
            order = np.argsort(-row, kind="stable")
            keep = int((np.cumsum(row[order]) < params.top_p).sum()) + 1
            out[order[:keep]] = row[order[:keep]]
        p = kept / kept.sum(axis=-1, keepdims=True)
    return p


def dense_logprobs(logits: np.ndarray) -> np.ndarray:
    z = np.asarray(logits, dtype=np.float64)
    shifted = z - z.max(axis=-1, keepdims=True)
    with np.errstate(divide="ignore"):
        return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def near_ties(rng: np.random.Generator, rows: int) -> np.ndarray:
    """Rows whose top logit sits one float32 step above a lower id's: exp takes the lower one to
    0.9999999999999998 of the top's 1.0, and dividing both by the row's total often rounds them
    to the same p, where the dense argmax picks the lower id and an argmax of exps would not."""
    z = rng.uniform(-3, 0, (rows, 64)).astype(np.float32)
    top = rng.uniform(1e-9, 4e-9, rows).astype(np.float32)
    z[:, 10] = top
    z[:, 3] = np.nextafter(top, np.float32(-1))
    return z


def logit_rows() -> list[tuple[str, np.ndarray]]:
    rng = np.random.default_rng(42)
    cases = [
        (f"scale {scale}", (rng.standard_normal((6, VOCAB)) * scale).astype(np.float32))
        for scale in (0.1, 3, 300)
    ]
    tied = np.zeros((3, 64), dtype=np.float32)
    tied[:, [5, 7]] = 2.0
    tied[1, :] = -np.inf
    tied[1, [3, 9]] = 1.5
    cases.append(("ties, -inf", tied))
    cases.append(("near ties", near_ties(rng, 400)))
    cases.append(("float64 rows", rng.standard_normal((4, 512)) * 5))
    return cases


CASES = logit_rows()
PARAMS = [
    GenerationParams(temperature=0.0),
    GenerationParams(temperature=0.8, top_p=0.95),
    GenerationParams(temperature=0.7, top_k=40, top_p=0.9),
    GenerationParams(temperature=1.3),
]


def test_the_near_ties_are_real_ties_of_p_that_an_argmax_of_exps_would_break_wrongly():
    rows = dict(CASES)["near ties"]
    p = dense_p(rows, PARAMS[0])
    lower_wins = np.argmax(p, axis=-1) == 3
    assert 10 < lower_wins.sum() < len(rows)  # both outcomes occur, so the test can fail


@pytest.mark.parametrize("params", PARAMS, ids=["greedy", "top-p", "top-k top-p", "hot"])
@pytest.mark.parametrize("name, rows", CASES, ids=[name for name, _ in CASES])
def test_every_value_a_record_reads_is_the_dense_computations_bits(name, rows, params):
    with np.errstate(invalid="ignore"):  # the all -inf row's softmax is NaN either way
        p = dense_p(rows, params)
        own = dense_logprobs(rows)
        scores = Scores(rows, params)
        for i in range(len(rows)):
            assert scores.choice(i) == int(np.argmax(p[i])), f"row {i}"
        tokens = np.argsort(-p[:, : min(8, p.shape[1])], axis=-1)[:, 0]
        assert np.array_equal(scores.probs_at(tokens), p[np.arange(len(tokens)), tokens], True)
        for i in range(min(len(rows), 5)):
            assert np.array_equal(scores.row(i), p[i], equal_nan=True)
            emitted = tokens[: i + 1].tolist()
            got = scores.emitted_logprobs(emitted)
            want = tuple(float(own[j, t]) for j, t in enumerate(emitted))
            assert np.array_equal(got, want, equal_nan=True)
            assert np.array_equal(scores.logprobs(i + 1), own[: i + 1], equal_nan=True)
        assert np.array_equal(scores.p, p, equal_nan=True)


def verdict_fields(verdict) -> tuple:
    arrays = (verdict.tokens, verdict.q, verdict.p, verdict.ratio, verdict.u)
    return (
        tuple(None if a is None else a.tolist() for a in arrays),
        verdict.accepted_count,
        verdict.correction_token,
        verdict.correction_kind,
        verdict.correction_u,
        verdict.correction_p,
    )


@pytest.mark.parametrize("params", PARAMS, ids=["greedy", "top-p", "top-k top-p", "hot"])
@pytest.mark.parametrize("name, rows", CASES[:3] + CASES[4:5], ids=["0.1", "3", "300", "near"])
def test_the_rules_decide_on_the_scores_as_they_decided_on_the_dense_p(name, rows, params):
    rng = np.random.default_rng(7)
    p = dense_p(rows, params)
    for trial in range(20):
        k = int(rng.integers(0, min(len(rows), 6)))
        # Drafts that follow the target's choice for a while, then leave it: every outcome.
        tokens = np.argmax(p[:k], axis=-1) if k else np.empty(0, dtype=np.int64)
        cut = int(rng.integers(0, k + 1))
        tokens[cut:] = rng.choice(np.flatnonzero(p[0] > 0), k - cut)
        draft = Draft.one_hot(tokens.astype(np.int64), rows.shape[1])
        scores = Scores(rows[: k + 1], params)
        if params.is_greedy:
            want, got = verify_greedy(draft, p[: k + 1]), verify_greedy(draft, scores)
        else:
            want = verify_sampling(draft, p[: k + 1], seed=trial, step=k)
            got = verify_sampling(draft, scores, seed=trial, step=k)
        assert verdict_fields(got) == verdict_fields(want)


def test_scores_leave_the_callers_logits_as_they_were():
    rows = CASES[1][1].copy()
    before = rows.copy()
    for params in PARAMS:
        scores = Scores(rows, params)
        scores.emitted_logprobs([1, 2])
        scores.logprobs(2)
        assert scores.choice(0) >= 0
    assert np.array_equal(rows, before)


def sample_over_the_whole_row(probs: np.ndarray, u: float) -> int:
    """sample() as it drew every recorded token before issue 42: a CDF over every entry."""
    cdf = np.cumsum(probs)
    index = int(np.searchsorted(cdf, u * cdf[-1], side="right"))
    return index if index < len(cdf) else int(np.flatnonzero(probs)[-1])


def test_a_draw_summed_over_the_tokens_with_mass_is_the_draw_over_the_whole_row():
    rng = np.random.default_rng(3)
    rows = [dense_p(rows, PARAMS[1])[i] for _, rows in CASES[:3] for i in range(3)]
    rows += [dense_p(CASES[1][1], GenerationParams(temperature=1.0))[0]]  # no zeros at all
    sparse = np.zeros(4096)
    sparse[rng.choice(4096, 7, replace=False)] = rng.random(7) * 1e-300  # subnormal sums
    rows.append(sparse)
    for row in rows:
        for u in [0.0, *rng.random(200), np.nextafter(1.0, 0.0)]:
            assert sample(row, u) == sample_over_the_whole_row(row, u)


def test_a_mostly_full_row_whose_total_rounds_up_still_draws_a_token_with_mass():
    row = np.zeros(10)
    row[:6] = 5e-324  # u * total rounds up to the total: the last token with mass, not id 9
    assert sample(row, 0.99) == sample_over_the_whole_row(row, 0.99) == 5

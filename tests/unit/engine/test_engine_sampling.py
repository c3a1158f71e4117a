import zlib

import numpy as np
import pytest

from decoding.engine import GenerationParams
from decoding.engine.providers.base import Scores
from decoding.engine.sampling import decimal, log_softmax, sample, top_tokens, warp


def softmax(z):
    e = np.exp(np.asarray(z, dtype=float) - np.max(z))
    return e / e.sum()


def warped(logits, **params):
    return warp(np.array([logits], dtype=float), GenerationParams(**params))[0]


def test_temperature_divides_the_logits_before_the_softmax():
    logits = [1.0, 2.0, 0.5, -1.0]
    np.testing.assert_allclose(warped(logits, temperature=0.5), softmax(np.array(logits) * 2))


def test_greedy_returns_the_plain_softmax_whatever_the_top_k_and_top_p():
    logits = [1.0, 2.0, 0.5, -1.0]
    np.testing.assert_allclose(warped(logits, temperature=0, top_k=1, top_p=0.1), softmax(logits))


def test_top_k_keeps_the_k_largest_logits():
    probs = warped([1.0, 4.0, 3.0, 2.0], top_k=2)
    np.testing.assert_allclose(probs, [0, *softmax([4.0, 3.0]), 0])


def test_top_k_breaks_ties_in_favour_of_the_lower_token_id():
    assert warped([1.0, 3.0, 3.0, 3.0], top_k=2).tolist() == [0.0, 0.5, 0.5, 0.0]


def test_top_k_zero_or_at_least_the_vocabulary_keeps_everything():
    logits = [1.0, 4.0, 3.0, 2.0]
    np.testing.assert_allclose(warped(logits, top_k=0), softmax(logits))
    np.testing.assert_allclose(warped(logits, top_k=4), softmax(logits))


@pytest.mark.parametrize(
    ("top_p", "expected"),
    [
        (0.4, [1, 0, 0, 0]),  # the top token alone already reaches 0.4
        (0.75, [0.625, 0.375, 0, 0]),  # 0.5 + 0.3 is the smallest prefix reaching 0.75
        (0.9, [0.5 / 0.95, 0.3 / 0.95, 0.15 / 0.95, 0]),
        (1.0, [0.5, 0.3, 0.15, 0.05]),
    ],
)
def test_top_p_keeps_the_smallest_nucleus_reaching_the_mass_and_renormalises(top_p, expected):
    np.testing.assert_allclose(warped(np.log([0.5, 0.3, 0.15, 0.05]), top_p=top_p), expected)


def test_top_p_breaks_ties_in_favour_of_the_lower_token_id():
    assert warped([0.0, 0.0, 0.0, 0.0], top_p=0.5).tolist() == [0.5, 0.5, 0.0, 0.0]


def test_top_p_applies_after_top_k_and_temperature():
    logits = np.log([0.1, 0.4, 0.2, 0.3]) * 2  # temperature 2 undoes the doubling
    # top-k 3 leaves 0.4, 0.3, 0.2 (renormalised /0.9); top-p 0.7 then keeps 0.4 and 0.3.
    np.testing.assert_allclose(
        warped(logits, temperature=2.0, top_k=3, top_p=0.7), [0, 4 / 7, 0, 3 / 7]
    )


def test_warp_scores_every_row_independently():
    rows = np.array([[0.0, 1.0, 2.0], [2.0, 1.0, 0.0]])
    probs = warp(rows, GenerationParams(top_k=1))
    assert probs.dtype == np.float64
    assert probs.tolist() == [[0, 0, 1], [1, 0, 0]]


@pytest.mark.parametrize(("u", "token"), [(0.0, 0), (0.1, 0), (0.2, 2), (0.999, 2)])
def test_sample_inverts_the_cdf_and_never_picks_a_zero_mass_token(u, token):
    assert sample(np.array([0.2, 0.0, 0.8]), u) == token


def test_sample_scales_u_by_the_total_of_an_unnormalised_row():
    assert sample(np.array([1.0, 0.0, 3.0]), 0.3) == 2
    assert sample(np.array([1.0, 0.0, 3.0]), 0.2) == 0


def test_sample_clamps_to_the_last_token_with_mass_when_u_times_total_rounds_up():
    assert sample(np.array([5e-324, 0.0]), 0.75) == 0


def test_decimal_is_the_shortest_string_that_reads_back_exactly():
    assert decimal(0.1) == "0.1"
    assert decimal(1) == "1.0"
    for x in np.random.default_rng(0).random(1000):
        assert float(decimal(x)) == x


def test_decimal_refuses_values_with_no_place_in_a_record():
    with pytest.raises(ValueError):
        decimal(float("nan"))


@pytest.mark.parametrize("n", [1, 3, 20])
def test_top_tokens_are_the_full_sorts_first_n_ties_to_the_lower_id(n):
    rng = np.random.default_rng(n)
    for _ in range(50):
        row = rng.choice([0.0, 0.01, 0.02, 0.05, 0.1], size=200)  # many ties, some zeros
        row = row / row.sum()
        order = sorted(range(len(row)), key=lambda t: (-row[t], t))[:n]
        expected = tuple((t, float(row[t])) for t in order if row[t] > 0)
        assert top_tokens(row, n) == expected


def test_top_tokens_of_a_short_or_empty_request():
    row = np.array([0.5, 0.0, 0.5])
    assert top_tokens(row, 10) == ((0, 0.5), (2, 0.5))
    assert top_tokens(row, 0) == ()


def _nucleus_by_full_sort(logits: np.ndarray, temperature: float, top_p: float) -> np.ndarray:
    """The nucleus as first written (a stable sort of the whole row): the reference the faster
    warp must equal bit for bit, since recorded p values are compared across builds of it."""
    z = np.asarray(logits, dtype=np.float64) / temperature
    shifted = np.exp(z - z.max(axis=-1, keepdims=True))
    probs = shifted / shifted.sum(axis=-1, keepdims=True)
    order = np.argsort(-probs, axis=-1, kind="stable")
    ranks = np.empty_like(order)
    np.put_along_axis(ranks, order, np.arange(probs.shape[-1])[None, :], axis=-1)
    sorted_probs = np.take_along_axis(probs, order, axis=-1)
    keep = (np.cumsum(sorted_probs, axis=-1) < top_p).sum(axis=-1, keepdims=True) + 1
    probs = np.where(ranks < keep, probs, 0.0)
    return probs / probs.sum(axis=-1, keepdims=True)


@pytest.mark.parametrize("top_p", [1e-9, 0.05, 0.5, 0.9, 0.95, 0.999, 0.9999999])
@pytest.mark.parametrize(
    "shape",
    [
        "chat",  # a peaked row over a chat model's vocabulary
        "flat",  # nearly uniform: the nucleus is most of the row, past every first guess
        "ties",  # few distinct values: ties straddle every cut
        "one-hot",  # one token holds nearly all the mass
        "short",  # a vocabulary smaller than the first guess
    ],
)
def test_top_p_equals_a_sort_of_the_whole_row_bit_for_bit(shape, top_p):
    rng = np.random.default_rng(zlib.crc32(f"{shape} {top_p}".encode()))
    vocab = 40 if shape == "short" else 49152
    if shape == "chat":
        logits = rng.standard_normal((3, vocab)) * 3
    elif shape == "flat":
        logits = rng.standard_normal((3, vocab)) * 1e-3
    elif shape == "ties":
        logits = rng.integers(0, 6, size=(3, vocab)).astype(np.float64)
    elif shape == "one-hot":
        logits = np.zeros((3, vocab))
        logits[:, 7] = 40.0
    else:
        logits = rng.standard_normal((3, vocab))
    logits = logits.astype(np.float32)
    got = warp(logits, GenerationParams(temperature=0.8, top_p=top_p))
    assert np.array_equal(got, _nucleus_by_full_sort(logits, 0.8, top_p))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(
    "params",
    [{"temperature": 0.8}, {"temperature": 1.3, "top_k": 40}, {"temperature": 0.8, "top_p": 0.95}],
)
def test_sampled_warp_gives_the_bits_of_its_first_form_and_leaves_the_logits_alone(dtype, params):
    """warp works in one private float64 copy (the temperature divided and the softmax shifted in
    place, the nucleus written into one array): the bits of the form it was first written in,
    each step a new array, and the caller's logits untouched, float64 ones included."""
    rng = np.random.default_rng(7)
    logits = (rng.standard_normal((4, 49152)) * 3).astype(dtype)
    before = logits.copy()
    got = warp(logits, GenerationParams(**params))
    z = np.asarray(logits, dtype=np.float64) / params["temperature"]
    if "top_k" in params:
        kth = -np.sort(-z, axis=-1)[:, params["top_k"] - 1 : params["top_k"]]
        z = np.where(z >= kth, z, -np.inf)  # no ties among random normals
    if "top_p" in params:
        want = _nucleus_by_full_sort(logits, params["temperature"], params["top_p"])
    else:
        exps = np.exp(z - z.max(axis=-1, keepdims=True))
        want = exps / exps.sum(axis=-1, keepdims=True)
    assert np.array_equal(got, want)
    assert np.array_equal(logits, before)


def score_rows():
    """Rows a pass can give: random at several scales (float32, as llama.cpp returns them),
    exact ties at the top, and -inf entries (a remote's unplaced tokens)."""
    rng = np.random.default_rng(20261204)
    rows = [(rng.standard_normal((5, 49152)) * scale).astype(np.float32) for scale in (0.1, 3, 300)]
    tied = np.zeros((3, 64), dtype=np.float32)
    tied[:, [5, 7]] = 2.0
    tied[1, :] = -np.inf
    tied[1, [3, 9]] = 1.5
    return [*rows, tied]


ROW_KINDS = ["scale 0.1", "scale 3", "scale 300", "ties, -inf"]


@pytest.mark.parametrize("rows", score_rows(), ids=ROW_KINDS)
def test_greedy_scores_share_one_softmax_pass_and_keep_the_bits_of_two(rows):
    # The formulas before the pass was shared: softmax and log-softmax each with its own exp.
    z = np.asarray(rows, dtype=np.float64)
    shifted = z - z.max(axis=-1, keepdims=True)
    p = np.exp(shifted) / np.exp(shifted).sum(axis=-1, keepdims=True)
    with np.errstate(divide="ignore"):
        own = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
    scores = Scores(rows, GenerationParams(temperature=0.0))
    assert np.array_equal(scores.p, p)
    for emitted in range(1, len(rows) + 1):  # the emitted positions are a prefix of the pass
        assert np.array_equal(scores.logprobs(emitted), own[:emitted])
        assert np.array_equal(log_softmax(rows[:emitted]), own[:emitted])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_greedy_scores_work_in_a_copy_and_leave_the_callers_logits_as_they_were(dtype):
    # The pass shifts a float64 copy in place; a remote provider's rows may already be float64.
    rows = score_rows()[1].astype(dtype)
    before = rows.copy()
    scores = Scores(rows, GenerationParams(temperature=0.0))
    scores.logprobs(2)
    assert np.array_equal(rows, before)
    assert scores.logits is rows


def test_sampled_scores_warp_p_and_report_the_unwarped_logprobs():
    rows = score_rows()[1]
    params = GenerationParams(temperature=0.7, top_k=40, top_p=0.9)
    scores = Scores(rows, params)
    assert np.array_equal(scores.p, warp(rows, params))
    assert np.array_equal(scores.logprobs(2), log_softmax(rows[:2]))
    assert not np.array_equal(np.exp(scores.logprobs(2)), scores.p[:2])

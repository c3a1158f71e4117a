"""Warping logits into the distributions both models are compared on, and drawing from them."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from .params import GenerationParams

# An exp within this much of the row's top (exactly 1.0, exp(0)) may round to the top's p once
# both are divided by the row's total: only such entries can tie with the most probable token.
_NEAR_TOP = 1 - 2**-30


class Distributions:
    """Rows of next-token probabilities as the verification rules read them: each row's most
    probable token, p at given tokens, and a whole row where a draw needs it. Here from a dense
    (rows, vocab) p; Scores (providers.base) answers the same without making rows it is not
    asked for."""

    def __init__(self, p: np.ndarray) -> None:
        self._p = p

    @property
    def p(self) -> np.ndarray:
        return self._p

    def choice(self, row: int) -> int:
        """The most probable token of a row (the lowest id on a tie), as np.argmax finds it."""
        return int(np.argmax(self.p[row]))

    def probs_at(self, tokens: np.ndarray) -> np.ndarray:
        """(k,) p of tokens[i] at row i."""
        return self.p[np.arange(len(tokens)), tokens]

    def prob(self, row: int, token: int) -> float:
        return float(self.p[row, token])

    def row(self, row: int) -> np.ndarray:
        return self.p[row]


class Softmax:
    """The softmax and log-softmax of (n, vocab) logits z, taken as float64, from one exp pass:
    shifted = z - max(z), exps = exp(shifted), total = sum(exps) per row. The exp over the
    vocabulary is most of either's cost, and a row of float64 is 384 KiB, above the size from
    which glibc maps fresh pages for each allocation, so the pass makes one array, exps, and
    every value is read from it: a probability is exps / total, a log-probability
    shifted - log(total) with shifted made again only where it is asked for. Each row's values
    depend on that row alone, so any prefix of rows gives the bits a pass over those rows gives,
    and each value is the bits the whole-row formulas give (tests/unit/engine/test_engine_scores).
    """

    def __init__(self, logits: np.ndarray) -> None:
        self.logits = logits
        self.top = np.max(logits, axis=-1, keepdims=True).astype(np.float64)
        exps = np.subtract(logits, self.top, dtype=np.float64)  # exact: float32 -> float64
        self.exps = np.exp(exps, out=exps)
        self.total = exps.sum(axis=-1, keepdims=True)

    def probs(self) -> np.ndarray:
        return self.exps / self.total

    def prob(self, row: int, token: int) -> float:
        return float(self.exps[row, token] / self.total[row, 0])

    def probs_at(self, tokens: np.ndarray) -> np.ndarray:
        rows = np.arange(len(tokens))
        return self.exps[rows, tokens] / self.total[rows, 0]

    def choice(self, row: int) -> int:
        """np.argmax of the row's probabilities without dividing the whole row: p is monotone
        in exps, so only entries near the top's exp can round to its p (and then the lowest id
        wins, as np.argmax has it)."""
        exps, total = self.exps[row], self.total[row, 0]
        if not math.isfinite(total):
            return int(np.argmax(exps / total))
        near = np.flatnonzero(exps >= _NEAR_TOP)
        return int(near[np.argmax(exps[near] / total)])

    def log_probs(self, rows: int) -> np.ndarray:
        shifted = np.subtract(self.logits[:rows], self.top[:rows], dtype=np.float64)
        with np.errstate(divide="ignore"):  # a -inf logit (a remote's unplaced token) stays -inf
            return np.subtract(shifted, np.log(self.total[:rows]), out=shifted)

    def log_probs_at(self, tokens: Sequence[int]) -> tuple[float, ...]:
        """The log-probability of tokens[i] at row i."""
        rows = np.arange(len(tokens))
        shifted = np.subtract(self.logits[rows, tokens], self.top[rows, 0], dtype=np.float64)
        with np.errstate(divide="ignore"):
            return tuple(map(float, shifted - np.log(self.total[: len(tokens), 0])))


def _descending(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per row: the descending sort order and each entry's rank in it; ties go to the lower id."""
    order = np.argsort(-x, axis=-1, kind="stable")
    ranks = np.empty_like(order)
    np.put_along_axis(ranks, order, np.arange(x.shape[-1])[None, :], axis=-1)
    return order, ranks


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """(n, vocab) logits -> (n, vocab) float64 natural-log probabilities of the model itself,
    before any temperature, top-k or top-p: what the OpenAI API reports as logprobs."""
    return Softmax(logits).log_probs(len(logits))


def warp(logits: np.ndarray, params: GenerationParams) -> np.ndarray:
    """(n, vocab) logits -> (n, vocab) float64 probabilities: temperature, top-k, softmax, top-p.

    Greedy (temperature 0) returns the plain softmax, kept only for display: greedy decisions
    take the argmax. Speculative sampling is exact only if p and q are warped identically
    (docs/architecture.md, invariant 3), so draft and target both come through here.
    """
    if params.is_greedy:
        return Softmax(logits).probs()
    # One private float64 copy, worked in place: each vocabulary-wide array a step makes costs a
    # pass and fresh pages (Softmax), and a worker's jobs of several sequences take turns at
    # these passes between the model's (same bits: each operation is elementwise or along one row).
    z = np.divide(logits, params.temperature, dtype=np.float64)  # exact: float32 -> float64
    vocab = z.shape[-1]
    if 0 < params.top_k < vocab:
        _, ranks = _descending(z)
        z[ranks >= params.top_k] = -np.inf
    np.subtract(z, z.max(axis=-1, keepdims=True), out=z)
    np.exp(z, out=z)
    probs = np.divide(z, z.sum(axis=-1, keepdims=True), out=z)
    if params.top_p < 1:
        for row in probs:
            chosen = _nucleus(row, params.top_p)
            kept = row[chosen]
            row.fill(0.0)
            row[chosen] = kept
            # Renormalised by the whole row's sum (its bits depend on where the zeros lie),
            # divided only where it is not zero.
            row[chosen] = kept / row.sum()
    return probs


# The probabilities from which _nucleus sorts a row's entries, highest first, until the entries
# at or above one hold the nucleus: at most 4,096 entries can be >= 2^-12, and at top_p 0.95 a
# chat model's nucleus is a few hundred tokens of its 49,152, mostly above it.
NUCLEUS_FLOORS = (2.0**-12, 2.0**-20, 0.0)


def _nucleus(probs: np.ndarray, top_p: float) -> np.ndarray:
    """Nucleus (Holtzman et al. 2020) of one row: the ids of the smallest descending prefix with
    mass >= top_p (the caller zeroes the rest and renormalises). The prefix holds every entry
    whose cumulative mass before it is still below top_p, ties in the order of their ids.

    Sorts only the entries at or above a floor: they are a prefix of the descending order, ties
    whole, and a cumulative sum is sequential, so the prefix's sums are the bits a sort of the
    whole row gives. Once they reach top_p the cut is inside it (the sums never fall); otherwise
    the next, lower floor, down to the whole row. A comparison finds them in one pass, where a
    partition of the row took several."""
    for floor in NUCLEUS_FLOORS:
        candidates = np.flatnonzero(probs >= floor)  # ascending ids: ties stay in id order
        order = candidates[np.argsort(-probs[candidates], kind="stable")]
        keep = int((np.cumsum(probs[order]) < top_p).sum()) + 1
        if keep <= len(order) or len(candidates) == len(probs):
            return order[:keep]
    raise AssertionError("the last floor takes the whole row")  # pragma: no cover


def sample(probs: np.ndarray, u: float) -> int:
    """Inverse-CDF draw from one unnormalised row: the token whose CDF interval holds u * total.

    The CDF is summed over the tokens with mass only: adding a zero leaves a running sum's bits
    as they were, and the first entry of the CDF above u * total is always one where it rose, so
    the draw is the one a sum over the whole row gives, in a fraction of the time for a row that
    top-k or top-p cut to a few hundred tokens (a sequential sum over 49,152 took 130 us)."""
    held = None if np.count_nonzero(probs) > len(probs) // 2 else np.flatnonzero(probs)
    cdf = np.cumsum(probs if held is None else probs[held])  # indexing a full row costs more
    index = int(np.searchsorted(cdf, u * cdf[-1], side="right"))
    if index < len(cdf):
        return index if held is None else int(held[index])
    # u < 1 keeps u * total below total except for a subnormal total, where it can round up:
    # then take the last token with mass, never an index past the end or a zero-mass token.
    return int(np.flatnonzero(probs)[-1])


def decimal(x: float) -> str:
    """The shortest decimal string that reads back as the same binary64 (Python's repr)."""
    value = float(x)
    if not math.isfinite(value):
        raise ValueError(f"{value!r} has no place in an audit record")
    return repr(value)


def top_tokens(probs: np.ndarray, n: int) -> tuple[tuple[int, float], ...]:
    """The n most probable tokens of one row, most probable first (ties: the lower id), each
    with its probability; tokens of probability 0 (cut by top-k or top-p) are left out.

    O(vocabulary), not a sort of it: it runs for every emitted token of a job that asks."""
    n = min(n, len(probs))
    if n <= 0:
        return ()
    nth = np.partition(probs, len(probs) - n)[len(probs) - n]  # the n-th largest value
    above, tied = np.flatnonzero(probs > nth), np.flatnonzero(probs == nth)
    chosen = np.concatenate([above, tied[: n - len(above)]])  # flatnonzero: lower ids first
    order = chosen[np.lexsort((chosen, -probs[chosen]))]
    return tuple((int(t), float(probs[t])) for t in order if probs[t] > 0)

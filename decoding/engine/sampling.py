"""Warping logits into the distributions both models are compared on, and drawing from them."""

from __future__ import annotations

import math

import numpy as np

from .params import GenerationParams


class Softmax:
    """One pass over (n, vocab) float64 logits z that both the softmax and the log-softmax are
    made of: shifted = z - max(z), exps = exp(shifted), total = sum(exps) per row. The exp over
    the vocabulary is most of either's cost (0.8 ms a row on a Zen 1 core), so where p is the
    plain softmax (greedy) the log-probabilities reuse the pass instead of making a second. Each
    row's values depend on that row alone, so any prefix of rows gives the bits a pass over just
    those rows gives.

    A vocabulary row of float64 is 384 KiB, above the size from which glibc maps fresh pages for
    each allocation, so every array made here costs page faults as well as a pass: with
    `scratch`, z is the caller's throwaway copy and becomes `shifted` in place, and `probs`
    divides in place of the exps."""

    def __init__(self, z: np.ndarray, *, scratch: bool = False) -> None:
        top = z.max(axis=-1, keepdims=True)
        self.shifted = np.subtract(z, top, out=z) if scratch else z - top
        self.exps: np.ndarray | None = np.exp(self.shifted)
        self.total = self.exps.sum(axis=-1, keepdims=True)

    def probs(self) -> np.ndarray:
        """The probabilities, made in place of the exps (so asked for once)."""
        exps, self.exps = self.exps, None
        return np.divide(exps, self.total, out=exps)

    def log_probs(self, rows: int) -> np.ndarray:
        with np.errstate(divide="ignore"):  # a -inf logit (a remote's unplaced token) stays -inf
            return self.shifted[:rows] - np.log(self.total[:rows])


def _softmax(z: np.ndarray) -> np.ndarray:
    return Softmax(z).probs()


def _descending(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per row: the descending sort order and each entry's rank in it; ties go to the lower id."""
    order = np.argsort(-x, axis=-1, kind="stable")
    ranks = np.empty_like(order)
    np.put_along_axis(ranks, order, np.arange(x.shape[-1])[None, :], axis=-1)
    return order, ranks


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """(n, vocab) logits -> (n, vocab) float64 natural-log probabilities of the model itself,
    before any temperature, top-k or top-p: what the OpenAI API reports as logprobs."""
    z = np.asarray(logits, dtype=np.float64)
    return Softmax(z).log_probs(len(z))


def warp(logits: np.ndarray, params: GenerationParams) -> np.ndarray:
    """(n, vocab) logits -> (n, vocab) float64 probabilities: temperature, top-k, softmax, top-p.

    Greedy (temperature 0) returns the plain softmax, kept only for display: greedy decisions
    take the argmax. Speculative sampling is exact only if p and q are warped identically
    (ARCHITECTURE.md invariant 3), so draft and target both come through here.
    """
    if params.is_greedy:
        return _softmax(np.asarray(logits, dtype=np.float64))
    # One private float64 copy, worked in place: each vocabulary-wide array a step makes costs a
    # pass and fresh pages (Softmax), and a batching worker's jobs take turns at these passes
    # between the model's (same bits: each operation is elementwise or along one row).
    z = np.array(logits, dtype=np.float64)
    np.divide(z, params.temperature, out=z)
    vocab = z.shape[-1]
    if 0 < params.top_k < vocab:
        _, ranks = _descending(z)
        z[ranks >= params.top_k] = -np.inf
    probs = Softmax(z, scratch=True).probs()
    if params.top_p < 1:
        kept = np.zeros_like(probs)
        for row, out in zip(probs, kept, strict=True):
            _nucleus(row, params.top_p, out)
        probs = np.divide(kept, kept.sum(axis=-1, keepdims=True), out=kept)
    return probs


# How many of a row's most probable tokens _nucleus sorts first; doubled until they hold the
# nucleus (a few hundred at top_p 0.95 on a chat model's 49,152-token vocabulary).
NUCLEUS_CANDIDATES = 512


def _nucleus(probs: np.ndarray, top_p: float, kept: np.ndarray) -> None:
    """Nucleus (Holtzman et al. 2020) of one row, written into `kept` (zeros): the smallest
    descending prefix with mass >= top_p, the rest left zero (not renormalised). The prefix
    holds every entry whose cumulative mass before it is still below top_p, ties in the order of
    their ids.

    Sorts only the most probable entries: every entry at or above the m-th largest value, ties
    whole, is a prefix of the descending order, and a cumulative sum is sequential, so the
    prefix's sums are the bits a sort of the whole row gives. Once they reach top_p the cut is
    inside it (the sums never fall); otherwise m doubles, up to the whole row."""
    m = NUCLEUS_CANDIDATES
    while True:
        if m >= len(probs):
            candidates = np.arange(len(probs))
        else:
            nth = np.partition(probs, len(probs) - m)[len(probs) - m]
            candidates = np.flatnonzero(probs >= nth)  # ascending ids: ties stay in id order
        order = candidates[np.argsort(-probs[candidates], kind="stable")]
        below = np.cumsum(probs[order]) < top_p
        keep = int(below.sum()) + 1
        if keep <= len(order) or len(candidates) == len(probs):
            break
        m *= 2
    chosen = order[:keep]
    kept[chosen] = probs[chosen]


def sample(probs: np.ndarray, u: float) -> int:
    """Inverse-CDF draw from one unnormalised row: the token whose CDF interval holds u * total."""
    cdf = np.cumsum(probs)
    index = int(np.searchsorted(cdf, u * cdf[-1], side="right"))
    if index < len(cdf):
        return index
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

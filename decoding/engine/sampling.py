"""Warping logits into the distributions both models are compared on, and drawing from them."""

from __future__ import annotations

import math

import numpy as np

from .params import GenerationParams


def _softmax(z: np.ndarray) -> np.ndarray:
    shifted = np.exp(z - z.max(axis=-1, keepdims=True))
    return shifted / shifted.sum(axis=-1, keepdims=True)


def _descending(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per row: the descending sort order and each entry's rank in it; ties go to the lower id."""
    order = np.argsort(-x, axis=-1, kind="stable")
    ranks = np.empty_like(order)
    np.put_along_axis(ranks, order, np.arange(x.shape[-1])[None, :], axis=-1)
    return order, ranks


def warp(logits: np.ndarray, params: GenerationParams) -> np.ndarray:
    """(n, vocab) logits -> (n, vocab) float64 probabilities: temperature, top-k, softmax, top-p.

    Greedy (temperature 0) returns the plain softmax, kept only for display: greedy decisions
    take the argmax. Speculative sampling is exact only if p and q are warped identically
    (ARCHITECTURE.md invariant 3), so draft and target both come through here.
    """
    z = np.asarray(logits, dtype=np.float64)
    if params.is_greedy:
        return _softmax(z)
    z = z / params.temperature
    vocab = z.shape[-1]
    if 0 < params.top_k < vocab:
        _, ranks = _descending(z)
        z = np.where(ranks < params.top_k, z, -np.inf)
    probs = _softmax(z)
    if params.top_p < 1:
        # Nucleus (Holtzman et al. 2020): the smallest descending prefix with mass >= top_p.
        # The prefix holds every entry whose cumulative mass before it is still below top_p.
        order, ranks = _descending(probs)
        sorted_probs = np.take_along_axis(probs, order, axis=-1)
        keep = (np.cumsum(sorted_probs, axis=-1) < params.top_p).sum(axis=-1, keepdims=True) + 1
        probs = np.where(ranks < keep, probs, 0.0)
        probs = probs / probs.sum(axis=-1, keepdims=True)
    return probs


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

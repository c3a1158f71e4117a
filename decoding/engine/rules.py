"""Verification rules: given a draft (tokens, q) and the target's p, what is kept.

One function per rule, after vLLM's rejection sampler. Both are exact: the output has the
distribution the target alone would give (docs/architecture.md, invariant 3).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .drafters.base import Draft
from .rng import output_uniform, uniform
from .sampling import Distributions, sample

GREEDY = "greedy-argmax"
SAMPLING = "speculative-sampling"
COUPLED = "coupled-sampling"


@dataclass(frozen=True, eq=False)
class Verdict:
    """Per drafted token (arrays of length k) and the one token the target adds.

    Positions after the first rejection are not tested: they are never accepted and carry no
    accept draw (u is None for them, and throughout for greedy).
    """

    rule: str
    tokens: np.ndarray  # drafted token ids
    q: np.ndarray  # q_i(x_i)
    p: np.ndarray  # p_i(x_i)
    ratio: np.ndarray | None  # p_i(x_i) / q_i(x_i); None for greedy
    u: np.ndarray | None  # accept draws; None for greedy
    accepted_count: int
    correction_token: int
    correction_kind: str  # "argmax" | "argmax-bonus" | "residual" | "bonus" | "coupled"
    # | "coupled-bonus"
    correction_u: float | None
    correction_p: float  # p of the correction token at its position

    @property
    def rejected(self) -> bool:
        return self.accepted_count < len(self.tokens)

    @property
    def tested(self) -> int:
        """How many drafted positions the rule decided on."""
        return self.accepted_count + int(self.rejected)


def _accepted_prefix(accept: np.ndarray) -> int:
    """Length of the leading run of True: tokens after the first rejection are discarded."""
    return int(np.cumprod(accept).sum())


def _distributions(p: Distributions | np.ndarray) -> Distributions:
    """p as the rules read it: a step's Scores, or a dense (k + 1, vocab) array."""
    return p if isinstance(p, Distributions) else Distributions(np.asarray(p))


def verify_greedy(draft: Draft, p: Distributions | np.ndarray) -> Verdict:
    """Temperature 0: keep drafted x_i while x_i == argmax p_i; the target's argmax follows.

    The output is then the target's own greedy decoding token for token. Rows past the first
    mismatch are never looked at.
    """
    p = _distributions(p)
    k = len(draft.tokens)
    n, token = 0, p.choice(0)
    while n < k and int(draft.tokens[n]) == token:
        n += 1
        token = p.choice(n)
    return Verdict(
        rule=GREEDY,
        tokens=draft.tokens,
        q=draft.q_of_tokens(),
        p=p.probs_at(draft.tokens),
        ratio=None,
        u=None,
        accepted_count=n,
        correction_token=token,
        correction_kind="argmax" if n < k else "argmax-bonus",
        correction_u=None,
        correction_p=p.prob(n, token),
    )


def verify_sampling(
    draft: Draft, p: Distributions | np.ndarray, *, seed: int, step: int
) -> Verdict:
    """Speculative sampling (Leviathan et al. 2023, Algorithm 1; Chen et al. 2023, Algorithm 2).

    Accept x_i iff u_i < min(1, p_i(x_i) / q_i(x_i)). At the first rejection, draw from
    norm(max(0, p_i - q_i)); if all k are accepted, draw a bonus token from p_k. Either way the
    emitted token is distributed exactly as p_i.
    """
    p = _distributions(p)
    k = len(draft.tokens)
    q_x = draft.q_of_tokens()
    if np.any(q_x <= 0):
        raise ValueError("a drafter proposed a token to which its own q gives no probability")
    p_x = p.probs_at(draft.tokens)
    ratio = p_x / q_x
    u = np.array([uniform(seed, step, i, "accept") for i in range(k)])
    n = _accepted_prefix(u < np.minimum(1.0, ratio))
    if n < k:
        row = p.row(n)
        residual = np.maximum(row - draft.q_row(n), 0.0)
        # Mathematically positive after a rejection; rounding can empty it, and then p is exact.
        dist = residual if residual.sum() > 0 else row
        correction_u = uniform(seed, step, n, "residual")
        kind = "residual"
    else:
        dist = p.row(k)
        correction_u = uniform(seed, step, k, "bonus")
        kind = "bonus"
    token = sample(dist, correction_u)
    return Verdict(
        rule=SAMPLING,
        tokens=draft.tokens,
        q=q_x,
        p=p_x,
        ratio=ratio,
        u=u,
        accepted_count=n,
        correction_token=token,
        correction_kind=kind,
        correction_u=correction_u,
        correction_p=p.prob(n, token),
    )


def verify_coupled(
    draft: Draft, p: Distributions | np.ndarray, *, seed: int, position: int
) -> Verdict:
    """Coupled sampling (audit format 5, ADR 0032): the token at output position t is the
    target's inverse-CDF draw from p_t at u_t = output_uniform(seed, t), whoever proposed it.

    Drafted x_i (at position + i) is kept while it is the target's own draw there; at the first
    that is not, the target's draw is emitted (kind "coupled"); after k kept, the target's draw
    at position + k ("coupled-bonus"). A draft model drew x_i from q_i with the same u
    (DraftModelDrafter), so the two agree as often as their CDFs let them; a copied draft is
    kept with probability p_i(x_i), as under speculative sampling. Every emitted token is the
    target's draw at its position from its actual prefix, so the output is sequential sampling
    with those draws: distributed exactly as the target's, and the same for the same seed
    whatever the draft, the schedule or the pass it shares.
    """
    p = _distributions(p)
    k = len(draft.tokens)
    q_x = draft.q_of_tokens()
    if np.any(q_x <= 0):
        raise ValueError("a drafter proposed a token to which its own q gives no probability")
    draws = [output_uniform(seed, position + i) for i in range(k + 1)]
    n, token = 0, sample(p.row(0), draws[0])
    while n < k and int(draft.tokens[n]) == token:
        n += 1
        token = sample(p.row(n), draws[n])
    p_x = p.probs_at(draft.tokens)
    return Verdict(
        rule=COUPLED,
        tokens=draft.tokens,
        q=q_x,
        p=p_x,
        ratio=p_x / q_x,
        u=np.array(draws[:k]),
        accepted_count=n,
        correction_token=token,
        correction_kind="coupled" if n < k else "coupled-bonus",
        correction_u=draws[n],
        correction_p=p.prob(n, token),
    )

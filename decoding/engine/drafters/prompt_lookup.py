"""Drafting by copying: what followed the latest earlier occurrence of the context's last tokens.

Prompt lookup decoding (Saxena 2023; HF transformers' PromptLookupCandidateGenerator, vLLM's
n-gram proposer) costs no model call. It pays off where the output repeats its input, as
summaries, quotations and edits of a long document do.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np

from ..params import GenerationParams
from ..providers.base import ModelIdentity
from ..version import ENGINE_VERSION
from .base import Draft, Drafter


class PromptLookupDrafter(Drafter):
    """Proposes up to k tokens that followed the latest earlier match of the context's last n
    tokens, trying n = max_ngram first and down to min_ngram; nothing when no n matches.

    Deterministic, so q is one-hot: the sampling rule then accepts x iff u < p(x) and resamples
    from norm(max(0, p - onehot(x))), exactly as for any other q. The whole context is searched,
    with numpy, in time linear in its length.
    """

    def __init__(
        self,
        vocab_size: int,
        *,
        min_ngram: int = 1,
        max_ngram: int = 3,
        identity: ModelIdentity | None = None,
    ) -> None:
        if vocab_size < 1:
            raise ValueError(f"vocab_size must be at least 1, got {vocab_size}")
        if not 1 <= min_ngram <= max_ngram:
            raise ValueError(
                f"need 1 <= min_ngram <= max_ngram, got min_ngram={min_ngram}, "
                f"max_ngram={max_ngram}"
            )
        self.vocab_size = vocab_size
        self.min_ngram = min_ngram
        self.max_ngram = max_ngram
        if identity is None:
            revision = f"ngram {min_ngram}-{max_ngram}"
            identity = ModelIdentity(
                name="prompt-lookup",
                revision=revision,
                sha256=hashlib.sha256(revision.encode()).hexdigest(),
                runtime="pathfinder",
                runtime_version=ENGINE_VERSION,
            )
        self.identity = identity
        # The last context seen, as a list and as an array: the next step's context extends it,
        # so only the new tokens are converted. One tuple, swapped whole, so that a drafter
        # shared between threads can only miss the cache, never read a torn one.
        self._cache: tuple[list[int], np.ndarray] = ([], np.empty(0, dtype=np.int64))

    def prefill(self, context: Sequence[int]) -> None:
        self._as_array(context)

    def _as_array(self, context: Sequence[int]) -> np.ndarray:
        seen, array = self._cache
        tokens = list(context)
        m = len(seen)
        if len(tokens) >= m and tokens[:m] == seen:
            array = np.concatenate([array, np.array(tokens[m:], dtype=np.int64)])
        else:
            array = np.array(tokens, dtype=np.int64)
        self._cache = (tokens, array)
        return array

    def _continuation_start(self, tokens: np.ndarray) -> int | None:
        """Index just after the chosen match, where the proposed continuation starts."""
        last = len(tokens) - 1
        if last < self.min_ngram:  # an earlier match needs at least one token after the tail
            return None
        # Ends of earlier matches of the last token; each is followed by at least one token.
        ends = np.flatnonzero(tokens[:last] == tokens[last])
        if len(ends) == 0:
            return None
        # Extend each match backwards while it still equals the tail, up to max_ngram tokens.
        length = np.ones(len(ends), dtype=np.int64)
        alive = np.ones(len(ends), dtype=bool)
        for back in range(1, self.max_ngram):
            earlier = ends - back
            alive &= earlier >= 0
            alive[alive] &= tokens[earlier[alive]] == tokens[last - back]
            length += alive
        longest = int(length.max())
        if longest < self.min_ngram:
            return None
        return int(ends[length == longest][-1]) + 1

    def propose(
        self, context: Sequence[int], k: int, params: GenerationParams, *, seed: int, step: int
    ) -> Draft:
        history = self._as_array(context)
        start = self._continuation_start(history) if k > 0 else None
        tokens = np.empty(0, dtype=np.int64) if start is None else history[start : start + k].copy()
        q = np.zeros((len(tokens), self.vocab_size))
        q[np.arange(len(tokens)), tokens] = 1.0
        return Draft(tokens=tokens, q=q)

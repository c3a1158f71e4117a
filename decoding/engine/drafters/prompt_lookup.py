"""Drafting by copying: what followed the longest earlier occurrence of the context's last tokens.

Prompt lookup decoding (Saxena 2023; HF transformers' PromptLookupCandidateGenerator, vLLM's
n-gram proposer) costs no model call. It pays off where the output repeats its input, as
summaries, quotations and edits of a long document do, and, given references (earlier jobs of
the same matter: the same document asked about again), where the output repeats those.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np

from ..params import GenerationParams
from ..providers.base import ModelIdentity
from ..version import ENGINE_VERSION
from .base import Draft, Drafter, DraftSource, Reference

CONTEXT = "context"  # DraftSource.reference of a draft copied from the prompt and output so far


class PromptLookupDrafter(Drafter):
    """Proposes up to k tokens that followed the longest earlier match of the context's last
    tokens (compared up to max_ngram back, at least min_ngram long), in the context or in the
    references the generation was given (earlier jobs of the same matter); the latest on ties,
    the context before any reference. Nothing when nothing matches.

    Deterministic, so q is one-hot: the sampling rule then accepts x iff u < p(x) and resamples
    from norm(max(0, p - onehot(x))), exactly as for any other q. Each draft names its source
    and match length (DraftSource), which the record keeps and a match-driven schedule reads.
    The search is numpy over each source, linear in its length.
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
        self._references: tuple[Reference, ...] = ()

    def for_generation(self) -> PromptLookupDrafter:
        # The references are one generation's.
        return PromptLookupDrafter(
            self.vocab_size,
            min_ngram=self.min_ngram,
            max_ngram=self.max_ngram,
            identity=self.identity,
        )

    def prefill(self, context: Sequence[int], references: Sequence[Reference] = ()) -> None:
        self._as_array(context)
        self._references = tuple(ref for ref in references if len(ref.tokens) > 1)

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

    def _best_match(self, history: np.ndarray) -> tuple[str, np.ndarray, int, int] | None:
        """(source name, its tokens, continuation start, match length) of the longest match."""
        best = None
        sources = [(CONTEXT, history, len(history) - 1)]
        sources += [(ref.name, ref.tokens, len(ref.tokens) - 1) for ref in self._references]
        for name, tokens, stop in sources:
            found = _longest_match(tokens, stop, history, self.max_ngram)
            longer = found is not None and (best is None or found[1] > best[3])
            if longer and found[1] >= self.min_ngram:
                best = (name, tokens, found[0] + 1, found[1])
        return best

    def propose(
        self,
        context: Sequence[int],
        k: int,
        params: GenerationParams,
        *,
        seed: int,
        step: int,
        position: int | None = None,
    ) -> Draft:
        history = self._as_array(context)
        found = self._best_match(history) if k > 0 and len(history) else None
        if found is None:
            return Draft.one_hot(np.empty(0, dtype=np.int64), self.vocab_size)
        name, tokens, start, length = found
        proposed = tokens[start : start + k].copy()
        return Draft.one_hot(proposed, self.vocab_size, DraftSource(name, start, length))


def _longest_match(
    hay: np.ndarray, stop: int, needle: np.ndarray, longest: int
) -> tuple[int, int] | None:
    """(end, length) of the longest run of hay, ending at hay[end] with end < stop, equal to the
    last tokens of needle (compared up to `longest` back); the latest end on ties."""
    ends, length = match_lengths(hay, stop, needle, longest)
    if len(ends) == 0:
        return None
    top = int(length.max())
    return int(ends[length == top][-1]), top


def match_lengths(
    hay: np.ndarray, stop: int, needle: np.ndarray, longest: int
) -> tuple[np.ndarray, np.ndarray]:
    """Every end < stop in hay where hay's run ending there equals needle's last token or more,
    and how many of needle's last tokens (up to `longest`) it equals: (ends, lengths)."""
    if stop < 1 or len(needle) == 0:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
    ends = np.flatnonzero(hay[:stop] == needle[-1])
    length = np.ones(len(ends), dtype=np.int64)
    alive = np.ones(len(ends), dtype=bool)
    for back in range(1, min(longest, len(needle))):
        earlier = ends - back
        alive &= earlier >= 0
        live = np.flatnonzero(alive)
        if len(live) == 0:
            break
        alive[live] = hay[earlier[live]] == needle[-1 - back]
        length += alive
    return ends, length

"""The drafter interface (after HF transformers' candidate generators)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..params import GenerationParams
from ..providers.base import ModelIdentity


@dataclass(frozen=True, eq=False)
class Draft:
    """Proposed tokens and the distribution q each was proposed from.

    A deterministic drafter (prompt lookup) gives one-hot rows of q; the rules treat that
    like any other q.
    """

    tokens: np.ndarray  # (k,) int64
    q: np.ndarray  # (k, vocab) float64

    def __post_init__(self) -> None:
        if self.tokens.ndim != 1 or self.q.ndim != 2 or len(self.q) != len(self.tokens):
            raise ValueError(
                f"a draft needs (k,) tokens and (k, vocab) q, got {self.tokens.shape} "
                f"and {self.q.shape}"
            )


class Drafter(ABC):
    identity: ModelIdentity
    vocab_size: int

    def prefill(self, context: Sequence[int]) -> None:  # noqa: B027 (optional hook)
        """Take in the prompt before the first step (a draft model fills its KV cache).

        Called once per generation, before the target's prefill, and timed with it.
        """

    @abstractmethod
    def propose(
        self, context: Sequence[int], k: int, params: GenerationParams, *, seed: int, step: int
    ) -> Draft:
        """Propose at most k tokens to follow context (fewer when there is nothing to propose).

        Randomness must come from rng.uniform(seed, step, position, "draft") so drafts replay.
        """

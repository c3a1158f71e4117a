"""The drafter interface (after HF transformers' candidate generators)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..params import GenerationParams
from ..providers.base import ModelIdentity


@dataclass(frozen=True)
class DraftSource:
    """Where a copying drafter found its tokens: `match_length` tokens ending the context also
    occur in `reference` ("context": the prompt and output so far; else the job id of an earlier
    job of the same matter whose prompt and output it copied), ending just before `offset`, and
    the draft is what follows there. A reviewer can read the draft back from that source."""

    reference: str
    offset: int
    match_length: int

    def payload(self) -> dict:
        return {
            "reference": self.reference,
            "offset": self.offset,
            "match_length": self.match_length,
        }


@dataclass(frozen=True)
class Reference:
    """Tokens a copying drafter may copy from besides the context: an earlier job's prompt and
    output, named by its job id."""

    name: str
    tokens: np.ndarray  # (n,) int64


@dataclass(frozen=True, eq=False)
class Draft:
    """Proposed tokens and the distribution q each was proposed from.

    A deterministic drafter (prompt lookup) gives one-hot rows of q; the rules treat that
    like any other q. A copying drafter says where it copied from (source).
    """

    tokens: np.ndarray  # (k,) int64
    q: np.ndarray  # (k, vocab) float64
    source: DraftSource | None = None

    def prefix(self, k: int) -> Draft:
        """The first k tokens of this draft (k >= their number: the draft itself)."""
        if k >= len(self.tokens):
            return self
        source = self.source if k > 0 else None
        return Draft(tokens=self.tokens[:k], q=self.q[:k], source=source)

    def __post_init__(self) -> None:
        if self.tokens.ndim != 1 or self.q.ndim != 2 or len(self.q) != len(self.tokens):
            raise ValueError(
                f"a draft needs (k,) tokens and (k, vocab) q, got {self.tokens.shape} "
                f"and {self.q.shape}"
            )


class Drafter(ABC):
    identity: ModelIdentity
    vocab_size: int

    def prefill(self, context: Sequence[int], references: Sequence[Reference] = ()) -> None:  # noqa: B027
        """Take in the prompt before the first step (a draft model fills its KV cache), and the
        references this generation may copy from (only a copying drafter uses them).

        Called once per generation, before the target's prefill, and timed with it.
        """

    def for_generation(self) -> Drafter:
        """A drafter for one generation that may run beside others (a worker batching jobs):
        this one when it keeps nothing per generation, else a fresh one like it."""
        return self

    @abstractmethod
    def propose(
        self, context: Sequence[int], k: int, params: GenerationParams, *, seed: int, step: int
    ) -> Draft:
        """Propose at most k tokens to follow context (fewer when there is nothing to propose).

        Randomness must come from rng.uniform(seed, step, position, "draft") so drafts replay.
        """

"""The drafter interface (after HF transformers' candidate generators)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Hashable, Sequence
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

    A deterministic drafter (prompt lookup) proposes each token with certainty: its q is one-hot
    at the tokens, given by the vocabulary's size (`one_hot_vocab`) instead of a (k, vocab)
    array, which took 0.16 ms a step to fill at k = 8. The rules read q through `q_of_tokens`
    and `q_row`, the same values either way. A copying drafter says where it copied from
    (source).
    """

    tokens: np.ndarray  # (k,) int64
    q: np.ndarray | None = None  # (k, vocab) float64; None for a one-hot q
    source: DraftSource | None = None
    one_hot_vocab: int | None = None

    @classmethod
    def one_hot(
        cls, tokens: np.ndarray, vocab_size: int, source: DraftSource | None = None
    ) -> Draft:
        return cls(tokens=tokens, source=source, one_hot_vocab=vocab_size)

    def q_of_tokens(self) -> np.ndarray:
        """(k,) float64: the probability q gave each drafted token."""
        if self.q is None:
            return np.ones(len(self.tokens))
        return self.q[np.arange(len(self.tokens)), self.tokens]

    def q_row(self, i: int) -> np.ndarray:
        """(vocab,) float64: position i's whole distribution."""
        if self.q is None:
            row = np.zeros(self.one_hot_vocab)
            row[self.tokens[i]] = 1.0
            return row
        return self.q[i]

    def prefix(self, k: int) -> Draft:
        """The first k tokens of this draft (k >= their number: the draft itself)."""
        if k >= len(self.tokens):
            return self
        source = self.source if k > 0 else None
        q = None if self.q is None else self.q[:k]
        return Draft(tokens=self.tokens[:k], q=q, source=source, one_hot_vocab=self.one_hot_vocab)

    def __post_init__(self) -> None:
        if (self.q is None) == (self.one_hot_vocab is None):
            raise ValueError("a draft needs either q or one_hot_vocab")
        shape = (len(self.tokens), self.one_hot_vocab) if self.q is None else self.q.shape
        if self.tokens.ndim != 1 or len(shape) != 2 or shape[0] != len(self.tokens):
            raise ValueError(
                f"a draft needs (k,) tokens and (k, vocab) q, got {self.tokens.shape} and {shape}"
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
        """A drafter for one generation that may run beside others (a worker decoding several
        jobs in shared passes): this one when it keeps nothing per generation, else a fresh one
        like it."""
        return self

    def walled(self, wall: Hashable) -> Drafter:
        """This drafter as the generations behind one wall (a matter) see it: one that keeps
        state between calls (a draft model's KV cache) keeps it per wall (Provider.walled)."""
        return self

    def forget_wall(self, wall: Hashable) -> None:  # noqa: B027
        """Drop whatever state the wall's generations left (their matter's texts were
        destroyed): nothing, for a drafter that keeps none."""

    @abstractmethod
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
        """Propose at most k tokens to follow context (fewer when there is nothing to propose).

        Randomness must come from rng so drafts replay: with coupled draws (`position`, the
        output position of the first proposed token) the i-th token is drawn with
        rng.output_uniform(seed, position + i), the draw the target's token there is taken
        with; without, rng.uniform(seed, step, i, "draft").
        """

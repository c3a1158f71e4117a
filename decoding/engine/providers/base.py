"""The provider contract every model (stub, local weights, remote) implements."""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Hashable, Sequence
from dataclasses import asdict, dataclass

import numpy as np

from ..grammar import masked
from ..params import GenerationParams
from ..sampling import Distributions, Softmax, warp


@dataclass(frozen=True)
class ModelIdentity:
    """What a reviewer needs to name the exact model that made a decision: everything its
    output depends on (engine.weights says how each hash is taken)."""

    name: str
    revision: str
    sha256: str  # of the weight file(s) the spec names
    runtime: str
    runtime_version: str
    tokenizer_sha256: str = ""
    config_sha256: str = ""
    chat_template_sha256: str = ""
    # When the runtime loaded a conversion of those weights (a GGUF dequantized to safetensors),
    # the SHA-256 of the converted files it actually loaded, verified at each load.
    converted_sha256: str = ""
    # When the loaded file was made by Pathfinder from another (the shipped GGUF requantized by
    # llama.cpp's quantizer, engine.model_files), the SHA-256 of that source file.
    source_sha256: str = ""
    # The quantization the loaded file states of itself (a GGUF's general.file_type, "Q8_0").
    file_type: str = ""

    def as_payload(self) -> dict[str, str]:
        return asdict(self)


@dataclass(frozen=True)
class Neighbours:
    """What else a provider's next pass carries: the other sequences evaluated alongside this
    one, each padded to the widest request (idle slots in range included), as its last pass
    had it. A draft schedule prices a step on it (engine.schedule.StepCost)."""

    sequences: int


ALONE = Neighbours(0)

# The wall of calls made outside any job (a model's load, a measurement, a test): a wall of its
# own, so a job never starts from state such a call left, nor such a call from a job's.
NO_WALL: Hashable = None


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """How many leading tokens two sequences share (what a KV cache can keep)."""
    # Each step's context extends the cache's: compared whole as lists, at C speed (a Python
    # loop over a 1,000-token context took 43 us a step).
    shorter = min(len(a), len(b))
    if list(a[:shorter]) == list(b[:shorter]):
        return shorter
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


class Scores(Distributions):
    """One pass's (num_positions, vocab) rows, as the verification rules read them (p, warped by
    the request's parameters) and as the records report them (the model's own log-probabilities
    of the `logits`), making only what a step reads. Greedy p is the plain softmax, read from
    one exp pass (sampling.Softmax) point by point: a step needs each row's most probable token
    and p at a few tokens, never a whole divided row. Sampled p is warped whole, since a draw
    reads a whole row; its log-probabilities then take their own pass, of the emitted rows only.
    Every value has the bits the dense computation gives (tests/unit/engine/test_engine_scores).
    """

    def __init__(self, logits: np.ndarray, params: GenerationParams) -> None:
        started = time.perf_counter_ns()
        self.logits = logits
        self._greedy = params.is_greedy
        self._dense: np.ndarray | None = None if self._greedy else warp(logits, params)
        self._softmax: Softmax | None = Softmax(logits) if self._greedy else None
        self.made_ns = time.perf_counter_ns() - started  # a step's "scores" part

    @property
    def p(self) -> np.ndarray:
        if self._dense is None:
            self._dense = self._own(len(self.logits)).probs()
        return self._dense

    def choice(self, row: int) -> int:
        return self._softmax.choice(row) if self._greedy else super().choice(row)

    def probs_at(self, tokens: np.ndarray) -> np.ndarray:
        return self._softmax.probs_at(tokens) if self._greedy else super().probs_at(tokens)

    def prob(self, row: int, token: int) -> float:
        return self._softmax.prob(row, token) if self._greedy else super().prob(row, token)

    def row(self, row: int) -> np.ndarray:
        if self._greedy and self._dense is None:
            return self._softmax.exps[row] / self._softmax.total[row]
        return super().row(row)

    def emitted_logprobs(self, tokens: Sequence[int]) -> tuple[float, ...]:
        """The model's own log-probability of tokens[i] at position i (the emitted tokens)."""
        return self._own(len(tokens)).log_probs_at(tokens)

    def logprobs(self, rows: int) -> np.ndarray:
        """The model's own log-probabilities at the first `rows` positions, whole rows (for the
        most probable tokens a request asks to see)."""
        return self._own(rows).log_probs(rows)

    def _own(self, rows: int) -> Softmax:
        """The unwarped softmax of at least the first `rows` positions."""
        if self._softmax is None or len(self._softmax.logits) < rows:
            self._softmax = Softmax(self.logits[:rows])
        return self._softmax


class Provider(ABC):
    """A model seen as one forward pass over a context.

    Implementations must be pure in their inputs (same context, same logits) so that recorded
    runs replay; real ones keep a KV cache for the prefix shared with their previous call.
    """

    identity: ModelIdentity
    vocab_size: int

    def prefill(self, context: Sequence[int]) -> int:
        """Process a prompt ahead of decoding (fills a KV cache); stateless providers skip it.
        Returns how many leading prompt tokens were already cached and not evaluated again.

        Called once per generation so prompt processing is timed apart from decoding.
        """
        return 0

    @abstractmethod
    def logits(self, context: Sequence[int], num_positions: int) -> np.ndarray:
        """(num_positions, vocab_size) next-token logits for the trailing prefixes of context.

        Row t scores the token after context[: len(context) - num_positions + 1 + t]: one call
        with num_positions=1 drafts a token, one with k + 1 verifies k drafted tokens.
        """

    def neighbours(self) -> Neighbours:
        """What else the next pass carries: nothing, for a provider that evaluates alone."""
        return ALONE

    def walled(self, wall: Hashable) -> Provider:
        """This provider as the calls behind one wall (a matter) see it. State a provider keeps
        from call to call (a KV cache, saved prompts) is the worker's fastest side channel: a
        call behind one wall never starts from, nor is timed by, state that a call behind
        another left (docs/adr/0024). A stateless provider is its own view."""
        return self

    def forget_wall(self, wall: Hashable) -> None:  # noqa: B027
        """Drop whatever state calls behind `wall` left (their matter's texts were destroyed):
        nothing, for a provider that keeps none."""

    def next_distributions(
        self, context: Sequence[int], num_positions: int, params: GenerationParams
    ) -> np.ndarray:
        return warp(self._checked_logits(context, num_positions), params)

    def next_scores(
        self,
        context: Sequence[int],
        num_positions: int,
        params: GenerationParams,
        allowed: np.ndarray | None = None,
    ) -> Scores:
        """next_distributions, and the model's own log-probabilities beside them (from the same
        pass): what the target's records report as each emitted token's logprob. `allowed`
        (num_positions, vocab) is a grammar's mask (engine.grammar): refused tokens get -inf
        before anything is made from the logits."""
        logits = self._checked_logits(context, num_positions)
        return Scores(logits if allowed is None else masked(logits, allowed), params)

    def _checked_logits(self, context: Sequence[int], num_positions: int) -> np.ndarray:
        if not 1 <= num_positions <= len(context):
            raise ValueError(f"num_positions {num_positions} outside 1..{len(context)}")
        logits = self.logits(context, num_positions)
        if logits.shape != (num_positions, self.vocab_size):
            raise ValueError(
                f"{self.identity.name} returned logits of shape {logits.shape}, "
                f"expected {(num_positions, self.vocab_size)}"
            )
        return logits


class Walled(Provider):
    """One wall's view of a provider that keeps state between calls: every call carries the
    wall, so the provider checks it in the same critical section as its cache (two jobs of two
    matters may call it in turns)."""

    def __init__(self, inner: Provider, wall: Hashable) -> None:
        self._inner = inner
        self._wall = wall
        self.identity = inner.identity
        self.vocab_size = inner.vocab_size
        self.tokenizer = getattr(inner, "tokenizer", None)

    def prefill(self, context: Sequence[int]) -> int:
        return self._inner.prefill(context, wall=self._wall)

    def logits(self, context: Sequence[int], num_positions: int) -> np.ndarray:
        return self._inner.logits(context, num_positions, wall=self._wall)

    def neighbours(self) -> Neighbours:
        return self._inner.neighbours()

    def walled(self, wall: Hashable) -> Provider:
        return self._inner.walled(wall)

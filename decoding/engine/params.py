"""Sampling parameters and the request the engine decodes; validated at construction."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field, fields

from .grammar import ResponseFormat

# The audit store accepts only integers that every JSON reader holds exactly (I-JSON, RFC 7493),
# and the seed is written into every record.
MAX_SEED = 2**53 - 1
# OpenAI's bound on top_logprobs: a record keeps at most this many alternatives per token.
MAX_TOP_LOGPROBS = 20


def _require_int(name: str, value: object, minimum: int, maximum: int | None = None) -> None:
    # bool is an int subclass; True as a token budget is a caller bug, not 1.
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if value < minimum or (maximum is not None and value > maximum):
        upper = "" if maximum is None else f" and at most {maximum}"
        raise ValueError(f"{name} must be at least {minimum}{upper}, got {value}")


@dataclass(frozen=True)
class Bounds:
    """What one generation parameter accepts: its kind, its least and most value (`above`: the
    least is excluded) and whether null stands for "the model's default". Every API's fields,
    the response schemas and the engine's own check are made from these (one home)."""

    kind: type  # int or float
    least: int | float
    most: int | float | None = None
    above: bool = False
    nullable: bool = False
    help: str = ""

    def problem(self, value: object) -> str | None:
        """Why `value` is not accepted, or None (the engine's check; the APIs' fields say the
        same in DRF's words)."""
        if value is None:
            return None if self.nullable else "must not be null"
        if self.kind is int and (not isinstance(value, int) or isinstance(value, bool)):
            return f"must be an integer, got {value!r}"  # True as a token budget is a bug
        if (
            not isinstance(value, int | float)
            or isinstance(value, bool)
            or not math.isfinite(value)
        ):
            return f"must be a finite number, got {value!r}"
        if value < self.least or (self.above and value == self.least):
            return f"must be {'above' if self.above else 'at least'} {self.least}, got {value}"
        if self.most is not None and value > self.most:
            return f"must be at most {self.most}, got {value}"
        return None


def _param(default, bounds: Bounds):
    return field(default=default, metadata={"bounds": bounds})


@dataclass(frozen=True)
class GenerationParams:
    """How to sample: the same warping is applied to draft (q) and target (p) distributions.
    Each field is a generation parameter a caller may give; its Bounds are the one statement
    of what it accepts (`bounds_of`)."""

    max_tokens: int = _param(
        16,
        Bounds(int, 1, help="The most tokens to generate (at most PATHFINDER_MAX_OUTPUT_TOKENS)"),
    )
    temperature: float = _param(
        1.0, Bounds(float, 0.0, 2.0, help="Sampling temperature; 0 decodes greedily (argmax)")
    )
    top_k: int = _param(0, Bounds(int, 0, help="Sample among the k most probable tokens; 0: all"))
    top_p: float = _param(
        1.0,
        Bounds(
            float,
            0.0,
            1.0,
            above=True,
            help="Nucleus sampling, above 0 and at most 1: "
            "sample among the fewest tokens whose probability reaches top_p",
        ),  # fmt: skip
    )
    seed: int = _param(
        0, Bounds(int, 0, MAX_SEED, help="The draws' seed; a job without one draws its own")
    )
    draft_length: int = _param(
        4,
        Bounds(
            int,
            0,
            help="The most tokens the draft proposes per step (at most "
            "PATHFINDER_MAX_DRAFT_LENGTH)",
        ),
    )
    eos_token_id: int | None = _param(
        None,
        Bounds(
            int,
            0,
            nullable=True,
            help="The end-of-sequence token; null: none (decode max_tokens tokens)",
        ),  # fmt: skip
    )

    def __post_init__(self) -> None:
        for name, bounds in bounds_of().items():
            problem = bounds.problem(getattr(self, name))
            if problem is not None:
                raise ValueError(f"{name} {problem}")

    @property
    def is_greedy(self) -> bool:
        return self.temperature == 0


@functools.cache
def bounds_of() -> dict[str, Bounds]:
    """Every generation parameter, in declaration order, with what it accepts (read once: every
    record's params are written from it)."""
    return {f.name: f.metadata["bounds"] for f in fields(GenerationParams)}


PARAM_NAMES = tuple(bounds_of())


@dataclass(frozen=True)
class GenerationRequest:
    request_id: str
    prompt_token_ids: tuple[int, ...]
    params: GenerationParams
    # How many of the target's most probable tokens each record keeps per emitted position
    # (the OpenAI API's top_logprobs); 0 keeps none, so nobody pays for them unasked.
    top_logprobs: int = 0
    # Sampled with coupled draws, one per output position (audit format 5, ADR 0032): the same
    # seed gives the same tokens whatever the schedule or the pass it shares. False: the
    # step-keyed draws of trails of earlier formats, which their replays need.
    coupled: bool = False
    # Structured outputs: the grammar every emitted token must keep to (engine.grammar's
    # ResponseFormat; None: unconstrained).
    response_format: ResponseFormat | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.request_id, str) or not self.request_id:
            raise ValueError("request_id must be a non-empty string")
        _require_int("top_logprobs", self.top_logprobs, 0, MAX_TOP_LOGPROBS)
        # Accept any sequence, store a tuple: a request must not change under the decoder.
        object.__setattr__(self, "prompt_token_ids", tuple(self.prompt_token_ids))
        if not self.prompt_token_ids:
            raise ValueError("prompt_token_ids must not be empty")
        for token in self.prompt_token_ids:
            _require_int("prompt_token_ids", token, 0)

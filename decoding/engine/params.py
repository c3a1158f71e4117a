"""Sampling parameters and the request the engine decodes; validated at construction."""

from __future__ import annotations

import math
from dataclasses import dataclass

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


def _require_real(name: str, value: object) -> float:
    if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    return float(value)


@dataclass(frozen=True)
class GenerationParams:
    """How to sample: the same warping is applied to draft (q) and target (p) distributions."""

    max_tokens: int = 16
    temperature: float = 1.0
    top_k: int = 0  # 0 = off
    top_p: float = 1.0
    seed: int = 0
    draft_length: int = 4
    eos_token_id: int | None = None

    def __post_init__(self) -> None:
        _require_int("max_tokens", self.max_tokens, 1)
        if _require_real("temperature", self.temperature) < 0:
            raise ValueError(f"temperature must be at least 0, got {self.temperature}")
        _require_int("top_k", self.top_k, 0)
        if not 0 < _require_real("top_p", self.top_p) <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        _require_int("seed", self.seed, 0, MAX_SEED)
        _require_int("draft_length", self.draft_length, 0)
        if self.eos_token_id is not None:
            _require_int("eos_token_id", self.eos_token_id, 0)

    @property
    def is_greedy(self) -> bool:
        return self.temperature == 0


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

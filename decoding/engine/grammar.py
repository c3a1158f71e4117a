"""Structured outputs (issue 44, ADR 0031): the grammar a request's response_format compiles to,
and that grammar's state along one request's output, a speculative step at a time.

At every position of a step the target's logits are masked by the grammar before the decision
rule reads them (tokens it refuses get -inf), so what is emitted is distributed exactly as the
constrained target's alone, and greedy decoding is the constrained target's own greedy
decoding. A drafted token the grammar refuses could never be accepted: the draft is cut before
it, ahead of the verify pass. llguidance compiles the schema and computes the masks.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import llguidance
import llguidance.numpy as llg_numpy
import numpy as np

TYPES = ("json_object", "json_schema")
# The library and its options are part of what a mask depends on: the request record names both.
LIBRARY = f"llguidance {llguidance.__version__}"
# JSON as json.dumps writes it: ", " between items and ": " after keys, no other whitespace. A
# grammar that allows any whitespace lets a small model spend its whole budget on newlines.
JSON_OPTIONS = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}
ANY_OBJECT = {"type": "object"}
_EXECUTOR = llguidance.LLExecutor(num_threads=1)


class ResponseFormatError(ValueError):
    """A response_format the service refuses, naming the field at fault."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field


def _canonical(value: object) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


@dataclass(frozen=True)
class ResponseFormat:
    """OpenAI's response_format, for the two types that constrain decoding. `schema` is the
    JSON Schema (json_schema) or None (json_object: any JSON object)."""

    type: str
    schema: dict | None = None
    name: str | None = None
    strict: bool = False

    @classmethod
    def parse(cls, value: object, field: str = "response_format") -> ResponseFormat | None:
        """From the request's value; None for {"type": "text"} (no constraint). The schema is
        compiled here once, so a schema the library cannot take is refused before anything is
        stored."""
        if value is None:
            return None
        if not isinstance(value, dict):
            raise ResponseFormatError(field, "Must be an object with a 'type'.")
        kind = value.get("type")
        if kind == "text":
            return None
        if kind not in TYPES:
            raise ResponseFormatError(
                f"{field}.type", f"Must be 'text', 'json_object' or 'json_schema', got {kind!r}."
            )
        if kind == "json_object":
            made = cls(type=kind)
        else:
            made = cls._json_schema(value.get("json_schema"), f"{field}.json_schema")
        problem = made.problem()
        if problem is not None:
            raise ResponseFormatError(
                f"{field}.json_schema.schema" if made.schema is not None else field, problem
            )
        return made

    @classmethod
    def _json_schema(cls, spec: object, field: str) -> ResponseFormat:
        if not isinstance(spec, dict):
            raise ResponseFormatError(field, "Must be an object with a 'name' and a 'schema'.")
        name = spec.get("name")
        if not isinstance(name, str) or not 1 <= len(name) <= 64:
            raise ResponseFormatError(f"{field}.name", "Must be a string of 1 to 64 characters.")
        schema = spec.get("schema")
        if not isinstance(schema, dict):
            raise ResponseFormatError(f"{field}.schema", "Must be a JSON Schema object.")
        strict = spec.get("strict", False)
        if not isinstance(strict, bool):
            raise ResponseFormatError(f"{field}.strict", "Must be true or false.")
        return cls(type="json_schema", schema=schema, name=name, strict=strict)

    def as_request(self) -> dict:
        """In OpenAI's shape, the schema as the request gave it."""
        if self.type == "json_object":
            return {"type": self.type}
        return {
            "type": self.type,
            "json_schema": {"name": self.name, "schema": self.schema, "strict": self.strict},
        }

    def stored(self) -> str:
        """As a job stores it: JSON text, so that the schema keeps its properties' order (the
        order the output's keys take), which a JSON column would not keep."""
        return json.dumps(self.as_request(), ensure_ascii=False)

    @classmethod
    def from_stored(cls, text: str) -> ResponseFormat | None:
        """A job's stored format ("" for none), compiled again (a replay's, a record's)."""
        return cls.parse(json.loads(text)) if text else None

    def grammar(self) -> str:
        """The llguidance grammar this format compiles to."""
        return llguidance.LLMatcher.grammar_from_json_schema(
            self.schema if self.schema is not None else ANY_OBJECT, overrides=JSON_OPTIONS
        )

    def schema_text(self) -> str:
        """The schema as canonical JSON (sorted keys): the text the request record binds."""
        return _canonical(self.schema if self.schema is not None else ANY_OBJECT)

    def problem(self) -> str | None:
        """Why the library cannot compile this format, or None."""
        try:
            error = llguidance.LLMatcher.validate_grammar(self.grammar())
        except ValueError as exc:
            error = str(exc)
        return f"Not a JSON Schema this service can compile: {error}" if error else None


class Constraint:
    """One request's grammar state over the target's vocabulary. `allowed_prefix` says how much
    of a draft the grammar takes from here, `masks` what it allows at each position of a step,
    `advance` moves it past the tokens a step emitted."""

    def __init__(self, response_format: ResponseFormat, tokenizer: llguidance.LLTokenizer):
        self._matcher = llguidance.LLMatcher(tokenizer, response_format.grammar(), log_level=0)
        if self._matcher.is_error():
            raise ValueError(f"the grammar did not compile: {self._matcher.get_error()}")
        self._vocab = tokenizer.vocab_size
        self._eos = frozenset(tokenizer.eos_tokens)

    def allowed_prefix(self, tokens: list[int]) -> int:
        """How many leading tokens the grammar takes, in order, from its current state."""
        return self._matcher.validate_tokens(tokens) if tokens else 0

    def masks(self, draft: list[int]) -> np.ndarray:
        """(len(draft) + 1, vocab) booleans: the tokens allowed after the output so far plus
        each prefix of the draft (which the grammar must take whole: allowed_prefix)."""
        bitmask = llg_numpy.allocate_token_bitmask(len(draft) + 1, self._vocab)
        if draft:  # one call for the step: masks along the draft, the state rolled back
            llg_numpy.fill_next_token_bitmask_par_with_draft_tokens(
                _EXECUTOR, [(self._matcher, 0, list(draft))], bitmask
            )
        else:
            llg_numpy.fill_next_token_bitmask(self._matcher, bitmask, 0)
        if self._matcher.is_error():
            raise ValueError(f"the grammar refused the draft: {self._matcher.get_error()}")
        bits = np.unpackbits(bitmask.view(np.uint8), axis=1, bitorder="little")
        return bits[:, : self._vocab].astype(bool)

    def advance(self, tokens: tuple[int, ...]) -> None:
        """Past a step's emitted tokens. End-of-text ends the output rather than entering the
        grammar (which, once complete, allows nothing else): it is not consumed."""
        tokens = list(tokens)
        if tokens and tokens[-1] in self._eos:
            tokens.pop()
        if not self._matcher.consume_tokens(tokens):
            raise ValueError(f"the grammar refused emitted tokens: {self._matcher.get_error()}")


def masked(logits: np.ndarray, allowed: np.ndarray) -> np.ndarray:
    """The logits with every token the grammar refuses at its position set to -inf."""
    if allowed.shape != logits.shape:
        raise ValueError(f"a mask of shape {allowed.shape} for logits of shape {logits.shape}")
    if not allowed.any(axis=1).all():
        raise ValueError("the grammar allows no token at a position")
    return np.where(allowed, logits, np.array(-np.inf, dtype=logits.dtype))

"""What a generation request must satisfy before anything is stored, whichever way it came in
(the native API, /v1, `manage.py generate`): a model that exists, one prompt that model can
take, the service's limits, and parameters the model decodes exactly. Serializers check only
shapes (types and ranges); every rule that needs the model or a setting is here, once.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass

from django.conf import settings

from decoding import tokenizers
from decoding.engine import PARAM_NAMES, GenerationParams, ResponseFormat, ResponseFormatError
from decoding.kinds.registry import PROVIDER_KINDS
from decoding.model_specs import params_refusal, unavailable
from decoding.models import ModelSpec
from decoding.prompts import Prompt, PromptError, prompt_tokenize

# Those with a default for every job (sampling_defaults); a seed is drawn per job, and the end
# token is the tokenizer's.
DEFAULTED_PARAMS = tuple(name for name in PARAM_NAMES if name not in ("seed", "eos_token_id"))


class InvalidInput(ValueError):
    """A request the service refuses, naming the field to fix (a 400 on the APIs, an error from
    the command line)."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class JobInput:
    spec: ModelSpec
    prompt: Prompt
    messages: list[dict] | None
    params: dict  # every field of PARAM_NAMES: what was given, else the defaults
    top_logprobs: int  # alternatives each record keeps per token (GenerationRequest's)
    # Structured outputs: the response_format as a job stores it (ResponseFormat.stored), or
    # "" (unconstrained; {"type": "text"} included).
    response_format: str = ""


def job_input(
    *,
    model: str | None = None,
    prompt: str | None = None,
    messages: list[dict] | None = None,
    prompt_token_ids: list[int] | None = None,
    top_logprobs: int = 0,
    response_format: dict | None = None,
    **given,
) -> JobInput:
    """The request checked and completed, or InvalidInput naming the first field at fault."""
    unknown = sorted(set(given) - set(PARAM_NAMES))
    if unknown:
        raise TypeError(f"unknown generation parameter {unknown[0]!r}")
    name = model or settings.PATHFINDER_DEFAULT_MODEL
    spec = ModelSpec.objects.filter(name=name).first()
    if spec is None:
        valid = ", ".join(servable.name for servable in servable_specs()) or "none"
        raise InvalidInput("model", f"No model named {name!r}. Models served here: {valid}.")
    cannot = unavailable(spec)
    if cannot is not None:
        raise InvalidInput("model", f"Model {name!r} cannot be served here: {cannot}.")
    if messages is not None:
        messages = [{"role": m["role"], "content": m["content"]} for m in messages]
    try:
        tokenized = prompt_tokenize(
            spec, prompt=prompt, messages=messages, prompt_token_ids=prompt_token_ids
        )
    except PromptError as exc:
        raise InvalidInput(exc.field, str(exc)) from exc
    _check_limits(given)
    params = job_params(spec, given)
    _check_exact(spec, params)
    eos = params["eos_token_id"]
    if eos is not None and eos >= tokenizers.vocab_size(spec):
        raise InvalidInput("eos_token_id", f"Token id {eos} is outside the model's vocabulary.")
    if top_logprobs > spec.top_logprobs:
        raise InvalidInput(
            "top_logprobs",
            f"Model {spec.name} records at most {spec.top_logprobs} top log-probabilities per "
            "token (its spec's top_logprobs).",
        )
    constrained = _response_format(spec, params, response_format)
    return JobInput(
        spec=spec,
        prompt=tokenized,
        messages=messages,
        params=params,
        top_logprobs=top_logprobs,
        response_format=constrained.stored() if constrained is not None else "",
    )


def _response_format(spec: ModelSpec, params: dict, given: object) -> ResponseFormat | None:
    """The request's grammar, compiled once here so that a schema the library cannot take is
    refused before anything is stored (engine.grammar)."""
    try:
        constrained = ResponseFormat.parse(given)
    except ResponseFormatError as exc:
        raise InvalidInput(exc.field, str(exc)) from exc
    if constrained is None:
        return None
    if not PROVIDER_KINDS[spec.provider].masks_exactly:
        raise InvalidInput(
            "response_format",
            "Not exact on a remote model: the grammar's most probable token may lie outside "
            "the top log-probabilities its server reports.",
        )
    if params["eos_token_id"] is None or params["eos_token_id"] != _default_eos(spec):
        raise InvalidInput(
            "eos_token_id",
            "A response_format ends the output with the model's own end-of-text token: leave "
            "eos_token_id unset and ignore_eos off.",
        )
    return constrained


def servable_specs() -> list[ModelSpec]:
    """The specs this installation can serve, by name: what GET /v1/models lists, and what a
    request naming another model is told."""
    return [spec for spec in ModelSpec.objects.order_by("name") if unavailable(spec) is None]


def sampling_defaults(spec: ModelSpec) -> dict:
    """What a request that leaves a parameter out decodes with: the spec's defaults (its model's
    recommendation, ModelSpec.default_params_source), else the engine's (OpenAI's) and the
    service's draft length. No seed (each job draws its own) and no eos_token_id (the
    tokenizer's, unless the spec names one)."""
    engine = GenerationParams()
    return {
        **{name: getattr(engine, name) for name in DEFAULTED_PARAMS},
        "draft_length": settings.PATHFINDER_DEFAULT_DRAFT_LENGTH,
        **{k: v for k, v in (spec.default_params or {}).items() if k in PARAM_NAMES},
    }


def job_params(spec: ModelSpec, given: dict) -> dict:
    """The request's decoding parameters: what it gave, else the spec's defaults, else ours."""
    params = {"eos_token_id": _default_eos(spec), **sampling_defaults(spec), **given}
    if params.get("seed") is None:
        # Every job has a seed, so every job can be replayed.
        params["seed"] = secrets.randbelow(2**53)
    # A spec's defaults stay within the limits too (what a caller gives is refused beyond them).
    params["max_tokens"] = min(params["max_tokens"], settings.PATHFINDER_MAX_OUTPUT_TOKENS)
    params["draft_length"] = min(params["draft_length"], settings.PATHFINDER_MAX_DRAFT_LENGTH)
    return params


def _default_eos(spec: ModelSpec) -> int | None:
    tokenizer = tokenizers.tokenizer_for(spec)
    return tokenizer.eos_token_id if tokenizer is not None else None


def _check_limits(given: dict) -> None:
    for field, limit in (
        ("max_tokens", settings.PATHFINDER_MAX_OUTPUT_TOKENS),
        ("draft_length", settings.PATHFINDER_MAX_DRAFT_LENGTH),
    ):
        value = given.get(field)
        if value is not None and value > limit:
            raise InvalidInput(field, f"Ensure this value is less than or equal to {limit}.")


def _check_exact(spec: ModelSpec, params: dict) -> None:
    """A remote model is exact only for greedy decoding and top-k within what it returns."""
    refusal = params_refusal(spec, temperature=params["temperature"], top_k=params["top_k"])
    if refusal is not None:
        field, reason = refusal
        raise InvalidInput(field, f"Not exact on this model: {reason}.")

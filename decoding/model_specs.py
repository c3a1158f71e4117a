"""Checking a ModelSpec when it is configured, so a bad pair never reaches a worker.

Reads only metadata (GGUF headers, config.json): cheap enough for the admin's save button. Each
provider and drafter kind checks its own part (decoding.kinds).
"""

from __future__ import annotations

from django.core.exceptions import ValidationError

from decoding.engine.params import PARAM_NAMES, GenerationParams
from decoding.kinds.registry import DRAFTER_KINDS, PROVIDER_KINDS


def model_spec_check(spec) -> int:
    """Validate a spec; return the target's vocabulary size. Errors name the offending field."""
    provider = PROVIDER_KINDS.get(spec.provider)
    if provider is None:
        raise ValidationError({"provider": f"unknown provider {spec.provider!r}"})
    target_vocab = provider.vocab_size(spec.path, field="path")
    provider.check(spec.provider_settings or {}, field="provider_settings")
    drafter = DRAFTER_KINDS.get(spec.drafter)
    if drafter is None:
        raise ValidationError({"drafter": f"unknown drafter {spec.drafter!r}"})
    drafter.check(spec, target_vocab)
    _check_default_params(spec.default_params)
    return target_vocab


def _check_default_params(defaults) -> None:
    """Defaults name request parameters, each a value a request could give."""
    if not isinstance(defaults, dict):
        raise ValidationError({"default_params": "must be a JSON object"})
    unknown = sorted(set(defaults) - set(PARAM_NAMES))
    if unknown:
        raise ValidationError(
            {"default_params": f"unknown parameter {unknown[0]!r}; known: {', '.join(PARAM_NAMES)}"}
        )
    try:
        GenerationParams(**defaults)
    except (TypeError, ValueError) as exc:
        raise ValidationError({"default_params": str(exc)}) from exc


def unavailable(spec) -> str | None:
    """Why this installation cannot serve the spec (a package its target or draft model needs
    is not installed), as the caller is told; None when it can."""
    provider = PROVIDER_KINDS.get(spec.provider)
    if provider is None:
        return f"its provider {spec.provider!r} is unknown"
    lacking = provider.missing()
    if lacking is not None:
        return f"its model needs what this installation lacks: {lacking}"
    drafter = DRAFTER_KINDS.get(spec.drafter)
    if drafter is None:
        return f"its drafter {spec.drafter!r} is unknown"
    try:
        draft = drafter.draft_provider(spec)
    except ValidationError as exc:
        return f"its draft model cannot be built ({'; '.join(exc.messages)})"
    lacking = draft[0].missing() if draft is not None else None
    if lacking is not None:
        return f"its draft model needs what this installation lacks: {lacking}"
    return None


def params_refusal(spec, *, temperature: float, top_k: int) -> tuple[str, str] | None:
    """(field, reason) when the spec's target or draft model cannot decode these parameters
    exactly, as its kind says (a remote model returns only some log-probabilities); else None."""
    models = [(PROVIDER_KINDS[spec.provider], spec.provider_settings or {})]
    draft = DRAFTER_KINDS[spec.drafter].draft_provider(spec)
    if draft is not None:
        models.append(draft)
    for kind, options in models:
        refusal = kind.refusal(options, temperature=temperature, top_k=top_k)
        if refusal is not None:
            return refusal
    return None

"""Checking a ModelSpec when it is configured, so a bad pair never reaches a worker.

Reads only metadata (GGUF headers, config.json): cheap enough for the admin's save button.
"""

from __future__ import annotations

import json
from pathlib import Path

from django.conf import settings
from django.core.exceptions import ValidationError

from decoding.engine.model_files import requantized
from decoding.engine.weights import SHIPPED_GGUF_TYPE, default_gguf_path

GGUF_SUFFIX = ".gguf"


def resolve_path(path: str) -> Path:
    """A spec's weights: the given file or directory, or the default model file when blank."""
    return Path(path).expanduser() if path else default_model_file()


def default_model_file() -> Path:
    """The shipped GGUF requantized to PATHFINDER_DEFAULT_GGUF_TYPE (made once, then verified
    against its provenance at each use), or the shipped file itself when that is its type."""
    shipped = default_gguf_path()
    file_type = settings.PATHFINDER_DEFAULT_GGUF_TYPE
    if file_type == SHIPPED_GGUF_TYPE:
        return shipped
    return requantized(shipped, settings.PATHFINDER_MODEL_CACHE_DIR, file_type).path


def model_spec_check(spec) -> int:
    """Validate a spec; return the target's vocabulary size. Errors name the offending field."""
    target_vocab = _vocab_size(spec.provider, spec.path, field="path")
    if spec.provider == "remote":
        _check_remote(spec.provider_settings or {}, field="provider_settings")
    if spec.drafter == "draft_model":
        draft = spec.drafter_settings or {}
        provider = draft.get("provider", spec.provider)
        if provider == "remote":
            _check_remote(draft, field="drafter_settings")
        if provider not in ("llamacpp", "transformers", "remote", "stub"):
            raise ValidationError({"drafter_settings": f"unknown draft provider {provider!r}"})
        draft_vocab = _vocab_size(provider, draft.get("path", ""), field="drafter_settings")
        if draft_vocab != target_vocab:
            raise ValidationError(
                {
                    "drafter_settings": (
                        f"the draft model's vocabulary has {draft_vocab} tokens and the target's "
                        f"{target_vocab}: a draft must share the target's tokenizer"
                    )
                }
            )
    elif spec.drafter == "prompt_lookup":
        draft = spec.drafter_settings or {}
        low, high = draft.get("min_ngram", 1), draft.get("max_ngram", 3)
        if not (isinstance(low, int) and isinstance(high, int) and 1 <= low <= high):
            raise ValidationError(
                {"drafter_settings": "prompt lookup needs integers 1 <= min_ngram <= max_ngram"}
            )
    return target_vocab


def _check_remote(options: dict, *, field: str) -> None:
    url = options.get("base_url", "")
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise ValidationError(
            {field: 'a remote model needs "base_url": the server\'s OpenAI API root, e.g. '
             '"http://host:8000/v1"'}
        )  # fmt: skip
    top = options.get("top_logprobs", 20)
    if not isinstance(top, int) or top < 1:
        raise ValidationError({field: '"top_logprobs" must be a positive integer'})


def remote_top_logprobs(spec) -> list[int]:
    """The log-probabilities per position of each remote model in the spec (none: [])."""
    tops = []
    if spec.provider == "remote":
        tops.append((spec.provider_settings or {}).get("top_logprobs", 20))
    draft = spec.drafter_settings or {}
    if spec.drafter == "draft_model" and draft.get("provider") == "remote":
        tops.append(draft.get("top_logprobs", 20))
    return tops


def _vocab_size(provider: str, path: str, *, field: str) -> int:
    if provider == "stub":
        return settings.PATHFINDER_STUB_VOCAB_SIZE
    try:
        weights = resolve_path(path)
    except Exception as exc:
        raise ValidationError({field: str(exc)}) from exc
    if not weights.exists():
        raise ValidationError({field: f"{weights} does not exist"})
    if weights.is_file() and weights.suffix == GGUF_SUFFIX:
        return _gguf_vocab_size(weights)
    config = weights / "config.json"
    if provider == "transformers" and config.is_file():
        return int(json.loads(config.read_text())["vocab_size"])
    raise ValidationError({field: f"{weights} is neither a GGUF file nor a model directory"})


def _gguf_vocab_size(path: Path) -> int:
    from gguf import GGUFReader  # heavy; only when checking a GGUF spec

    field = GGUFReader(str(path)).fields.get("tokenizer.ggml.tokens")
    if field is None:
        raise ValidationError({"path": f"{path} has no tokenizer vocabulary"})
    return len(field.data)

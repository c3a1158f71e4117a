"""Drafting by copying from the context and the matter's recent jobs (no model)."""

from __future__ import annotations

from django.core.exceptions import ValidationError

from decoding.engine import PromptLookupDrafter

from .base import DrafterKind


class PromptLookupKind(DrafterKind):
    name = "prompt_lookup"
    label = "prompt lookup (n-gram match in the context)"

    def check(self, spec, target_vocab: int) -> None:
        settings = spec.drafter_settings or {}
        low, high = settings.get("min_ngram", 1), settings.get("max_ngram", 3)
        if not (isinstance(low, int) and isinstance(high, int) and 1 <= low <= high):
            raise ValidationError(
                {"drafter_settings": "prompt lookup needs integers 1 <= min_ngram <= max_ngram"}
            )

    def build(self, spec, target):
        settings = spec.drafter_settings or {}
        return PromptLookupDrafter(
            target.vocab_size,
            min_ngram=settings.get("min_ngram", 1),
            max_ngram=settings.get("max_ngram", 3),
        )

"""Drafting with a smaller model that shares the target's tokenizer, of any provider kind."""

from __future__ import annotations

from django.core.exceptions import ValidationError

from decoding.engine import DraftModelDrafter

from .base import DrafterKind, ProviderKind


class DraftModelKind(DrafterKind):
    name = "draft_model"
    label = "draft model sharing the target's tokenizer"

    def __init__(self, providers: dict[str, ProviderKind]):
        # The provider kinds a draft may be (the registry's), handed in: no import back.
        self.providers = providers

    def draft_provider(self, spec) -> tuple[ProviderKind, dict]:
        """The draft's kind (drafter_settings.provider, else the target's) and its options
        (drafter_settings.provider_settings, as a target's are its spec's provider_settings)."""
        settings = spec.drafter_settings or {}
        name = settings.get("provider", spec.provider)
        if name not in self.providers:
            raise ValidationError({"drafter_settings": f"unknown draft provider {name!r}"})
        return self.providers[name], settings.get("provider_settings", {})

    def check(self, spec, target_vocab: int) -> None:
        kind, options = self.draft_provider(spec)
        kind.check(options, field="drafter_settings")
        path = (spec.drafter_settings or {}).get("path", "")
        draft_vocab = kind.vocab_size(path, field="drafter_settings")
        if draft_vocab != target_vocab:
            raise ValidationError(
                {
                    "drafter_settings": (
                        f"the draft model's vocabulary has {draft_vocab} tokens and the target's "
                        f"{target_vocab}: a draft must share the target's tokenizer"
                    )
                }
            )

    def build(self, spec, target):
        kind, options = self.draft_provider(spec)
        settings = spec.drafter_settings or {}
        draft = kind.build(
            settings.get("path", ""),
            settings.get("revision", ""),
            options,
            f"{spec.name}/draft",
            draft=True,
        )
        return DraftModelDrafter(draft)

"""The deterministic stub pair (tests and demos): token ids only, no tokenizer."""

from __future__ import annotations

from django.conf import settings

from decoding.engine import StubProvider

from .base import ProviderKind


class StubKind(ProviderKind):
    name = "stub"
    label = "deterministic stub (tests and demos)"

    def vocab_size(self, path: str, *, field: str) -> int:
        return settings.PATHFINDER_STUB_VOCAB_SIZE

    def tokenizer(self, path: str):
        return None

    def build(self, path, revision, options, name, *, draft):
        return StubProvider(
            vocab_size=settings.PATHFINDER_STUB_VOCAB_SIZE,
            seed=0,
            noise_seed=1 if draft else None,
            noise=settings.PATHFINDER_STUB_DRAFT_NOISE if draft else 0.0,
            name="stub-draft" if draft else "stub-target",
        )

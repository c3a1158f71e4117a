"""A Hugging Face model directory (or a GGUF, dequantized once) run by transformers."""

from __future__ import annotations

from django.conf import settings

from . import files
from .base import ProviderKind, packages_missing


class TransformersKind(ProviderKind):
    name = "transformers"
    label = "Hugging Face transformers"

    def vocab_size(self, path: str, *, field: str) -> int:
        return files.vocab_size(path, field=field, directories=True)

    def missing(self) -> str | None:
        return packages_missing(
            ("torch", "transformers"), "pip install '.[hf]', or make install-dev"
        )

    def tokenizer(self, path: str):
        # A spec over a GGUF tokenises with the same GGUF vocabulary.
        return files.tokenizer(path)

    def build(self, path, revision, options, name, *, draft):
        from decoding.engine.providers.transformers_hf import TransformersProvider

        return TransformersProvider(
            files.resolve_path(path),
            name=name,
            revision=revision,
            cache_dir=settings.PATHFINDER_MODEL_CACHE_DIR,
        )

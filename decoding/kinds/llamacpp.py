"""A GGUF file run by llama.cpp."""

from __future__ import annotations

from django.conf import settings

from . import files
from .base import ProviderKind, packages_missing


class LlamaCppKind(ProviderKind):
    name = "llamacpp"
    label = "llama.cpp (GGUF)"

    def vocab_size(self, path: str, *, field: str) -> int:
        return files.vocab_size(path, field=field, directories=False)

    def missing(self) -> str | None:
        return packages_missing(("llama_cpp",), "make install builds llama-cpp-python")

    def tokenizer(self, path: str):
        return files.tokenizer(path)

    def build(self, path, revision, options, name, *, draft):
        from decoding.engine.providers.llamacpp import LlamaCppProvider

        return LlamaCppProvider(
            files.resolve_path(path),
            name=name,
            revision=revision,
            n_threads=options.get("n_threads", settings.PATHFINDER_LLAMA_THREADS),
            n_ctx=options.get("n_ctx", context_size()),
            # The target's prefill is the one a review session repeats; a draft model's is
            # cheap beside it, so the memory goes to the target.
            prompt_cache_bytes=0 if draft else settings.PATHFINDER_PROMPT_CACHE_BYTES,
            cache_dir=settings.PATHFINDER_MODEL_CACHE_DIR,  # what was read of a file once
        )

    def sequence_engine(self, target, sequences):
        from decoding.engine.providers.llamacpp_sequences import SequenceEngine

        return SequenceEngine(target, sequences=sequences)


def context_size() -> int:
    """Room for the longest prompt, the longest output and a full draft beyond it."""
    return (
        settings.PATHFINDER_MAX_PROMPT_TOKENS
        + settings.PATHFINDER_MAX_OUTPUT_TOKENS
        + settings.PATHFINDER_MAX_DRAFT_LENGTH
        + 1
    )

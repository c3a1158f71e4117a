"""A spec's tokenizer without its model: what the web side tokenises prompts and relays text with.

Loaded by the spec's provider kind from the model file's vocabulary alone (decoding.kinds), so a
web process never loads weights.
"""

from __future__ import annotations

from django.conf import settings

from decoding.engine import Tokenizer
from decoding.kinds.registry import PROVIDER_KINDS
from decoding.models import ModelSpec


def tokenizer_for(spec: ModelSpec) -> Tokenizer | None:
    """The spec's tokenizer without the model (the web process tokenises prompts with it)."""
    return PROVIDER_KINDS[spec.provider].tokenizer(spec.path)


def vocab_size(spec: ModelSpec) -> int:
    tokenizer = tokenizer_for(spec)
    return tokenizer.vocab_size if tokenizer is not None else settings.PATHFINDER_STUB_VOCAB_SIZE

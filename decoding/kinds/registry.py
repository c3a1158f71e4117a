"""Every provider and drafter kind a ModelSpec can name, by name: the one list to extend."""

from __future__ import annotations

from .base import DrafterKind, ProviderKind
from .draft_model import DraftModelKind
from .llamacpp import LlamaCppKind
from .prompt_lookup import PromptLookupKind
from .remote import RemoteKind
from .stub import StubKind
from .transformers import TransformersKind

PROVIDER_KINDS: dict[str, ProviderKind] = {
    kind.name: kind for kind in (LlamaCppKind(), TransformersKind(), RemoteKind(), StubKind())
}
DRAFTER_KINDS: dict[str, DrafterKind] = {
    kind.name: kind for kind in (PromptLookupKind(), DraftModelKind(PROVIDER_KINDS))
}

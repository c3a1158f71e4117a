"""What every kind of model provider and drafter a ModelSpec can name must say about itself.

A kind is one class: how a spec naming it is checked when it is configured (metadata only,
cheap enough for the admin's save button; errors name the offending field), what vocabulary
and tokenizer it has, and how a worker builds it. A new file format, server or drafter is one
new module in this package, listed in registry.py.
"""

from __future__ import annotations

import importlib.util
from abc import ABC, abstractmethod
from typing import ClassVar

from decoding.engine import Drafter, Provider, Tokenizer


class ProviderKind(ABC):
    name: ClassVar[str]
    label: ClassVar[str]
    # Whether a grammar's mask (structured outputs) applies exactly: the model gives whole
    # distributions, so the most probable allowed token is always among them.
    masks_exactly: ClassVar[bool] = True

    @abstractmethod
    def vocab_size(self, path: str, *, field: str) -> int:
        """The vocabulary size of the model at `path`, read from metadata; ValidationError
        naming `field` when there is no such model."""

    def check(self, options: dict, *, field: str) -> None:  # noqa: B027 - most need no options
        """Refuse settings (`options`, the spec's `field`) that cannot work."""

    def missing(self) -> str | None:
        """What this installation lacks to run a model of this kind, as an instruction (the
        packages to install), or None when it has everything."""
        return None

    @abstractmethod
    def tokenizer(self, path: str) -> Tokenizer | None:
        """The model's tokenizer without its weights (web processes tokenise with it)."""

    @abstractmethod
    def build(self, path: str, revision: str, options: dict, name: str, *, draft: bool) -> Provider:
        """The loaded model, as a worker decodes with it (draft: it serves as a draft model)."""

    def sequence_engine(self, target: Provider, sequences: int):
        """A SequenceEngine decoding up to `sequences` jobs together in passes over the loaded
        target, or None when this kind has none (the jobs then take turns on the target)."""
        return None

    def refusal(self, options: dict, *, temperature: float, top_k: int) -> tuple[str, str] | None:
        """(field, reason) when a model of this kind cannot decode these request parameters
        exactly; None when it can (every kind that returns whole distributions)."""
        return None


def packages_missing(packages: tuple[str, ...], install: str) -> str | None:
    """Which of `packages` (import names) this Python cannot import, and how to install them;
    None when it has them all. Looked up without importing them (torch takes seconds)."""
    absent = [name for name in packages if importlib.util.find_spec(name) is None]
    if not absent:
        return None
    return f"{' and '.join(absent)} {'is' if len(absent) == 1 else 'are'} not installed ({install})"


class DrafterKind(ABC):
    name: ClassVar[str]
    label: ClassVar[str]

    @abstractmethod
    def check(self, spec, target_vocab: int) -> None:
        """Refuse the spec's drafter_settings when they cannot work with its target
        (ValidationError naming drafter_settings)."""

    @abstractmethod
    def build(self, spec, target: Provider) -> Drafter:
        """The drafter a worker uses with the spec's loaded target."""

    def draft_provider(self, spec) -> tuple[ProviderKind, dict] | None:
        """The provider kind and options of the model it drafts with, when it uses one."""
        return None

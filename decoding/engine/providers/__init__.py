"""Models behind one pure contract: logits for the trailing prefixes of a context."""

from .base import ModelIdentity, Provider
from .stub import StubProvider

__all__ = ["ModelIdentity", "Provider", "StubProvider"]

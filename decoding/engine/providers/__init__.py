"""Models behind one pure contract: logits for the trailing prefixes of a context.

The real-model providers are imported by module path only (providers.llamacpp,
providers.transformers_hf, providers.remote): they load llama.cpp, torch or an HTTP client,
which importing the engine must not.
"""

from .base import ModelIdentity, Provider
from .stub import StubProvider

__all__ = ["ModelIdentity", "Provider", "StubProvider"]

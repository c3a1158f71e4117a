"""The engine's version, recorded as the stub runtime's version and bumped when decisions change."""

ENGINE_VERSION = "1"

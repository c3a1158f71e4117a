"""The engine's version, recorded as the stub runtime's version and bumped when decisions change."""

ENGINE_VERSION = "2"  # 2: copying drafts take the longest match, also from references

"""The embedded default's own secret key: random, written once under var/ (mode 0600)."""

import os
import secrets
from pathlib import Path


def local_secret_key_create(path: Path) -> bool:
    """Write a new random key to `path` unless one is there; True when it was written."""
    if path.exists():
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        handle.write(secrets.token_urlsafe(50) + "\n")
    return True

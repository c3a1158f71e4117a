"""The log's checkpoint keys: the private signing key lives only where checkpoints are signed;
every other host verifies with the verifier key(s) it is given."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings

from .evidence import checkpoints


class SigningKeyMissing(Exception):
    """No signing key where one is needed: checkpoints are not signed (fail closed)."""


@dataclass(frozen=True)
class SigningKey:
    private: str  # C2SP signed-note private key string
    verifier: str  # what auditors pin: name+keyid+base64 public key


def signing_key() -> SigningKey:
    """The deployment's signing key. A missing file is an error, never replaced by a new key:
    a new key would silently start a log no examiner has pinned."""
    path = settings.PATHFINDER_CHECKPOINT_KEY_FILE
    if not path.exists():
        raise SigningKeyMissing(
            f"no checkpoint signing key at {path} (PATHFINDER_CHECKPOINT_KEY_FILE): checkpoints "
            "are signed only where that key is; manage.py bootstrap_local makes one for a new "
            "deployment"
        )
    words = path.read_text(encoding="ascii").split()
    if not words:
        raise SigningKeyMissing(f"the checkpoint signing key file {path} is empty")
    return SigningKey(words[0], checkpoints.verifier_key_for(words[0]))


def signing_key_create(path: Path | None = None) -> tuple[SigningKey, bool]:
    """The signing key at `path`, made (mode 0600) if there is none; (key, made now)."""
    path = path or settings.PATHFINDER_CHECKPOINT_KEY_FILE
    made = False
    if not path.exists():
        private, verifier = checkpoints.generate_signing_key(settings.PATHFINDER_LOG_ORIGIN)
        path.parent.mkdir(parents=True, exist_ok=True)
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "w", encoding="ascii") as handle:
            handle.write(f"{private}\n{verifier}\n")
        made = True
    return signing_key(), made


def verifier_keys() -> list[str]:
    """Every log key a checkpoint may verify with: the current one first, then retired ones
    (PATHFINDER_CHECKPOINT_VERIFIER_KEY), or the key file's own when that setting is empty."""
    configured = settings.PATHFINDER_CHECKPOINT_VERIFIER_KEY
    if configured:
        return list(configured)
    try:
        return [signing_key().verifier]
    except SigningKeyMissing as exc:
        raise SigningKeyMissing(
            f"{exc}; a host without it verifies with PATHFINDER_CHECKPOINT_VERIFIER_KEY"
        ) from exc


def shown_verifier_keys() -> list[str]:
    """verifier_keys() where this host knows them, else [] (a web process without the key file
    or PATHFINDER_CHECKPOINT_VERIFIER_KEY: the portal then shows no key)."""
    try:
        return verifier_keys()
    except SigningKeyMissing:
        return []


def verify_note(note: str, keys: list[str] | None = None) -> checkpoints.Checkpoint:
    """The checkpoint a note states, if a log key signed it; CheckpointError otherwise. Pass
    `keys` (verifier_keys()) when checking many notes, so the keys are read once."""
    return _verified(note, keys)[0]


def signer_of(note: str) -> str:
    """The log key that signed this note (after a rotation, maybe a retired one)."""
    return _verified(note, None)[1]


def _verified(note: str, keys: list[str] | None) -> tuple[checkpoints.Checkpoint, str]:
    errors = []
    for key in verifier_keys() if keys is None else keys:
        try:
            return checkpoints.parse_and_verify(note, key), key
        except checkpoints.CheckpointError as exc:
            errors.append(str(exc))
    raise checkpoints.CheckpointError("; ".join(errors))

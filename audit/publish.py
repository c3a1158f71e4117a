"""Checkpoints leave the database: each is written to PATHFINDER_CHECKPOINT_PUBLISH_DIR, one file
per tree size, never overwritten, and the database's log is checked against every one of them.

The directory stands for a write-once store (an object-locked bucket, a WORM volume, a mail
archive): what it protects against depends on who can rewrite it, which should be nobody who can
rewrite the database. docs/operations.md says how to deploy it.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Iterable
from pathlib import Path

from django.conf import settings

from .evidence import checkpoints, merkle
from .keys import verifier_keys, verify_note

_NAME = re.compile(r"checkpoint-(0|[1-9][0-9]*)\.txt")


class PublishConflict(Exception):
    """A different checkpoint was already published for this tree size: a fork of history."""


def published_path(size: int) -> Path:
    return settings.PATHFINDER_CHECKPOINT_PUBLISH_DIR / f"checkpoint-{size}.txt"


def publish(size: int, note: str, timestamp_token: bytes | None) -> Path:
    """Write the cosigned note (and its RFC 3161 token beside it) unless already there. A file
    appears whole or not at all (written aside, fsynced, then linked into place, which fails
    if the name exists). The same checkpoint again (its body: origin, size, root) is a no-op,
    whatever cosignatures it carries; another one for the same size is a PublishConflict."""
    path = published_path(size)
    if not _write_once(path, note.encode("utf-8")):
        published = path.read_text(encoding="utf-8")
        if checkpoints.note_body(published) != checkpoints.note_body(note):
            raise PublishConflict(
                f"{path} already holds another checkpoint of size {size}: the log was "
                "rewritten or forked; it is not overwritten"
            )
    if timestamp_token:
        _write_once(path.with_suffix(".tsr"), bytes(timestamp_token))
    return path


def _write_once(path: Path, data: bytes) -> bool:
    """Put `data` at `path` if nothing is there; False (and nothing written) if something is."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists():
        return False
    descriptor, scratch = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(scratch, 0o444)
        try:
            os.link(scratch, path)  # atomic, and never replaces an existing file
        except FileExistsError:
            return False
        directory = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)
        return True
    finally:
        os.unlink(scratch)


def published() -> list[tuple[Path, int]]:
    """(file, tree size its name claims) of every published checkpoint, by size."""
    directory = settings.PATHFINDER_CHECKPOINT_PUBLISH_DIR
    if not directory.is_dir():
        return []
    found = []
    for path in directory.iterdir():
        match = _NAME.fullmatch(path.name)
        if match:
            found.append((path, int(match.group(1))))
    return sorted(found, key=lambda item: item[1])


def published_failures(leaves: Iterable[bytes], log_size: int) -> list[str]:
    """Every published checkpoint the database's log no longer holds: not signed by the log's
    key, larger than the log (a rollback), or another root at its size (a rewrite). The log is
    read once, whatever the number of files."""
    failures, claims, keys = [], [], None
    for path, size in published():
        keys = keys or verifier_keys()
        try:
            signed = verify_note(path.read_text(encoding="utf-8"), keys)
        except (OSError, UnicodeDecodeError, checkpoints.CheckpointError) as exc:
            failures.append(f"published {path.name}: not a checkpoint signed by the log ({exc})")
            continue
        if signed.size != size:
            failures.append(f"published {path.name}: it signs size {signed.size}")
        elif signed.size > log_size:
            failures.append(
                f"published {path.name}: signs {signed.size} trails, the log holds {log_size}: "
                "the log was rolled back (a restored backup?)"
            )
        else:
            claims.append((path, signed))
    roots = merkle.roots_at(leaves, [signed.size for _, signed in claims])
    for path, signed in claims:
        if roots.get(signed.size) != signed.root:
            failures.append(
                f"published {path.name}: the log's first {signed.size} trails no longer hash "
                "to its root: history was rewritten"
            )
    return failures

"""Run one piece of read-only work over shards of the store, side by side, on one snapshot.

The calling process must be inside a REPEATABLE READ transaction (audit.verification's
snapshot). On PostgreSQL it exports that snapshot, forks a child per extra shard, and each child
reads through a connection of its own that imports the snapshot (`SET TRANSACTION SNAPSHOT`,
as pg_dump's parallel jobs do), so every shard sees exactly the rows the parent sees. Children
inherit what the parent already read (fork), send back their result pickled, and leave with
os._exit, so the parent's connection, which they also inherited, is never closed under it.
Elsewhere (SQLite, one core) the shards run one after another here.
"""

from __future__ import annotations

import os
import pickle
import traceback
from collections.abc import Callable, Sequence
from typing import TypeVar

from django.db import connection, connections, transaction

T = TypeVar("T")
S = TypeVar("S")

# Connections a child inherited and must never close (closing would end the parent's session).
_inherited: list = []


class ShardFailed(Exception):
    """A child's work raised; its traceback is the message."""


def workers() -> int:
    if connection.vendor != "postgresql":
        return 1
    return int(os.environ.get("PATHFINDER_VERIFY_WORKERS", 0)) or max(
        1, min(os.cpu_count() or 1, 4)
    )


def run_sharded(work: Callable[[S], T], shards: Sequence[S], *, side_by_side: bool) -> list[T]:
    """work(shard) for every shard, the first here and the rest in children (side by side), or
    all here one after another; results in order."""
    if not side_by_side or len(shards) <= 1 or connection.vendor != "postgresql":
        return [work(shard) for shard in shards]
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_export_snapshot()")
        (snapshot,) = cursor.fetchone()
    children = []
    for shard in shards[1:]:
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child
            os.close(read)
            _child(work, shard, snapshot, write)
        os.close(write)
        children.append((pid, read))
    results = [work(shards[0])]
    for pid, read in children:
        with os.fdopen(read, "rb") as pipe:
            data = pipe.read()
        os.waitpid(pid, 0)
        ok, value = pickle.loads(data) if data else (False, "the shard's process died")
        if not ok:
            raise ShardFailed(value)
        results.append(value)
    return results


def _child(work, shard, snapshot: str, write: int) -> None:
    try:
        _inherited.append(connections["default"])
        connections["default"] = connections.create_connection("default")
        with transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
                cursor.execute("SET TRANSACTION SNAPSHOT %s", [snapshot])
            payload = (True, work(shard))
        connections["default"].close()  # its own, never the parent's
    except BaseException:
        payload = (False, traceback.format_exc())
    try:
        with os.fdopen(write, "wb") as pipe:
            pipe.write(pickle.dumps(payload))
    finally:
        os._exit(0)

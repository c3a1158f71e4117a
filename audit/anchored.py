"""The verified-up-to point, so `verify_chain --all` walks only what is new or changed.

A successful run of the whole store records its point beside its verdict: the size of the
newest signed checkpoint it verified, that checkpoint's root, and the snapshot it read
(PostgreSQL's transaction snapshot xmin), under a MAC keyed by the deployment's secret key, so
a point written into the database by anyone else does not check. The next run takes a trail as
*anchored* when it was sealed under that checkpoint, no row of its records was written after
that snapshot (a row's xmin: an UPDATE or a re-INSERT writes a new one) and it still has the
number of records its ledger leaf sealed (a DELETE leaves none to look at). An anchored trail's
decision records are not walked again; its request and answer records still are, against its
job row, which is mutable and so checked every time, as are the trail rows, the whole ledger,
the checkpoints and the tiles. SQLite has no xmin: there every run walks every record.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db import connection
from django.utils.crypto import constant_time_compare, salted_hmac

from .models import Checkpoint, VerificationRun

_MAC_SALT = "pathfinder.audit.verified-point"
# A point older than this many transactions is not used (32-bit xids wrap at 2**31).
_MAX_XID_AGE = 2**30


@dataclass(frozen=True)
class Point:
    run_id: int
    size: int  # leaves of the checkpoint the run verified
    root_hash: str
    xmin: int  # the run's snapshot xmin (64-bit xid8)


def supported() -> bool:
    return connection.vendor == "postgresql"


def snapshot_xmin() -> int | None:
    """This transaction's snapshot xmin: every transaction it cannot see has an xid >= it."""
    if not supported():
        return None
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint")
        return cursor.fetchone()[0]


def point_mac(size: int, root_hash: str, xmin: int) -> str:
    return salted_hmac(_MAC_SALT, f"{size}:{root_hash}:{xmin}", algorithm="sha256").hexdigest()


def latest_point() -> tuple[Point | None, str | None]:
    """The newest usable point, and a failure when the newest one recorded does not check (a
    point made by someone without the secret key, or naming a checkpoint there is not)."""
    run = (
        VerificationRun.objects.filter(scope="all", ok=True, anchored_size__isnull=False)
        .order_by("-id")
        .first()
    )
    if run is None or not supported():
        return None, None
    point = Point(run.id, run.anchored_size, run.anchored_root, run.snapshot_xmin)
    expected = point_mac(point.size, point.root_hash, point.xmin)
    if not constant_time_compare(expected, run.point_mac):
        return None, f"verification run {run.id}'s verified point does not check (its MAC)"
    if not Checkpoint.objects.filter(tree_size=point.size, root_hash=point.root_hash).exists():
        return None, f"verification run {run.id}'s verified point names no stored checkpoint"
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint")
        if cursor.fetchone()[0] - point.xmin >= _MAX_XID_AGE:
            return None, None
    return point, None


def record_counts(
    point: Point, lo: str | None = None, hi: str | None = None
) -> dict[str, tuple[int, bool]]:
    """Per trail that has records (its id in [lo, hi); None: unbounded): (how many, whether
    any was written after the point's snapshot). No payload read."""
    bounds = [
        (clause, value)
        for clause, value in (("trail_id >= %s::uuid", lo), ("trail_id < %s::uuid", hi))
    ]
    where = [clause for clause, value in bounds if value is not None]
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT trail_id::text, count(*), bool_or(((xmin::text::bigint - %s) %% 4294967296"
            " + 4294967296) %% 4294967296 < 2147483648) FROM audit_decisionrecord"
            + (" WHERE " + " AND ".join(where) if where else "")
            + " GROUP BY trail_id",
            [point.xmin % 2**32, *(value for _, value in bounds if value is not None)],
        )
        return {trail_id: (count, changed) for trail_id, count, changed in cursor.fetchall()}

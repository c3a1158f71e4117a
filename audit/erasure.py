"""Erasing a trail's secrets under an order: the trail's salt and its decisions' openings.

What the chain hashes (every record's payload, the commitments and digests in it, the head, the
ledger leaf) stays, so the chain, the log and every bundle exported before still verify; what
only opened those commitments goes, so no one, ourselves included, can confirm a guess of the
destroyed texts from what is kept. An Erasure row is written first: the triggers (migration
0015) allow the blanking only for a trail that has one, and verification accepts a missing salt
or opening only then.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime

from .evidence import sealing
from .models import DecisionRecord, Erasure, Trail


@dataclass(frozen=True)
class ErasedTrails:
    trail_ids: list[str]
    # Trails of formats 1 and 2 carry their tokens in the clear in hashed records: destroying
    # those would break the chain, so they are kept, and the event says so.
    tokens_kept: list[str]


def erase_trails(
    job_ids: Collection[str], *, matter: str, order: str, by: str, at: datetime
) -> ErasedTrails:
    """Erase every trail (every attempt) of the jobs; call inside the destruction's
    transaction."""
    trails = list(
        Trail.objects.filter(job_id__in=list(job_ids))
        .exclude(id__in=Erasure.objects.values("trail_id"))
        .order_by("created_at")
    )
    Erasure.objects.bulk_create(
        Erasure(
            trail_id=trail.id, job_id=trail.job_id, matter=matter, order=order, erased_by=by,
            erased_at=at,
        )
        for trail in trails
    )  # fmt: skip
    ids = [trail.id for trail in trails]
    Trail.objects.filter(id__in=ids).exclude(salt="").update(salt="")
    DecisionRecord.objects.filter(trail_id__in=ids).exclude(openings="").update(openings="")
    return ErasedTrails(
        trail_ids=[str(i) for i in ids],
        tokens_kept=[str(t.id) for t in trails if 1 <= t.format_version < sealing.SEALED_SINCE],
    )

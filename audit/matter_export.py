"""Producing a matter: every sealed trail of a selection (a matter's jobs, a date range of them)
in one bundle, with one manifest, one signed and cosigned checkpoint, and an inclusion proof per
trail against that checkpoint. `python -m audit.offline_verify` checks it whole.

The selection itself (which trails a matter's jobs have) is the serving side's to make
(decoding.selectors.matter_trail_ids): the audit store knows trails, not matters. What it
cannot prove is left out and named in matter.json: a trail still open, or sealed after the
newest checkpoint. Nothing in the bundle depends on when it was made, so exporting the same
selection under the same checkpoint rebuilds it byte for byte.
"""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from . import tiles
from .evidence import bundle, descriptive
from .evidence.bundle_format import MATTER_FORMAT_VERSION
from .export import ExportError, described, listing, require_intact, signer, texts_of
from .log import latest_checkpoint, log_size
from .models import DecisionRecord, LedgerEntry, MatterKey, Trail

# Why a trail of the matter is not in the bundle (matter.json's left_out reasons).
STILL_OPEN = "still open: its job has not ended"
OUTSIDE = "outside the selection: its job was submitted on another day"


@dataclass(frozen=True)
class MatterSelection:
    """What was asked for: a matter and, optionally, the first and last day (UTC, inclusive)
    on which its jobs were submitted."""

    matter: str
    since: datetime.date | None = None
    until: datetime.date | None = None

    def described(self) -> str:
        return descriptive.selection_of(
            {"matter": self.matter, "since": _day(self.since), "until": _day(self.until)}
        )


@dataclass(frozen=True)
class MatterExport:
    path: Path
    sha256: str
    trail_ids: list[str]  # in the bundle, in log order
    left_out: int
    tree_size: int


def matter_export(
    *,
    selection: MatterSelection,
    trail_ids: Sequence[uuid.UUID],
    outside: Sequence[uuid.UUID] = (),
    outside_reason: str = OUTSIDE,
    out: Path | str,
) -> MatterExport:
    """Write the bundle of the trails `trail_ids` (the selection's, every attempt) to `out`.
    `outside`: the matter's other trails, which its tags let an examiner find in the log, so
    those the checkpoint covers are listed as left out, for `outside_reason`."""
    checkpoint = latest_checkpoint(log_size())
    if checkpoint is None:
        raise ExportError("no signed checkpoint yet: beat signs one within a minute of a seal")
    size = checkpoint.tree_size
    trails = {t.id: t for t in Trail.objects.filter(id__in=list(trail_ids))}
    leaves = {e.trail_id: e for e in LedgerEntry.objects.filter(trail_id__in=list(trails))}
    included, left_out = [], []
    for trail in sorted(trails.values(), key=lambda t: (str(t.job_id), t.attempt)):
        entry = leaves.get(trail.id)
        if trail.status != Trail.Status.SEALED or entry is None:
            left_out.append(_left_out(trail, STILL_OPEN))
        elif entry.seq >= size:
            left_out.append(_left_out(trail, f"sealed after the checkpoint of {size} trails"))
        else:
            included.append((entry.seq, trail, entry))
    if not included:
        raise ExportError(
            f"{selection.described()}: no sealed trail that a signed checkpoint covers "
            f"({len(left_out)} left out)"
        )
    sealed_outside = dict(
        LedgerEntry.objects.filter(trail_id__in=list(outside), seq__lt=size).values_list(
            "trail_id", "seq"
        )
    )
    for trail in sorted(
        Trail.objects.filter(id__in=sealed_outside), key=lambda t: sealed_outside[t.id]
    ):
        left_out.append(_left_out(trail, outside_reason))
    included.sort(key=lambda item: item[0])  # log order
    tree = tiles.Tiles(size)
    evidence, listed = [], []
    for seq, trail, entry in included:
        records = list(
            DecisionRecord.objects.filter(trail=trail)
            .order_by("seq")
            .values_list("seq", "prev_hash", "record_hash", "payload")
        )
        models, params = described(records)
        texts = texts_of(trail, records, ())
        evidence.append(
            bundle.TrailEvidence(
                records, str(trail.id), trail.format_version, seq, entry.payload,
                tree.inclusion_proof(seq), texts, models, params,
            )
        )  # fmt: skip
        listed.append(listing(trail, seq))
    require_intact([trail.id for _, trail, _ in included], selection.described())
    matter_doc = {
        "format_version": MATTER_FORMAT_VERSION,
        "matter": selection.matter,
        "since": _day(selection.since),
        "until": _day(selection.until),
        "tree_size": size,
        "trails": listed,
        "left_out": left_out,
    }
    key = MatterKey.objects.filter(matter=selection.matter).values_list("key", flat=True).first()
    if key is not None:
        matter_doc["matter_key"] = key
    else:  # every trail of the matter was sealed before the tags (audit.0011): nothing to find
        matter_doc["format_version"] = 1
    data = bundle.matter_bundle_bytes(
        matter=matter_doc,
        trails=evidence,
        checkpoint_note=checkpoint.note,
        timestamp_token=checkpoint.timestamp_token,
        verifier_key=signer(checkpoint.note),
    )
    digest = bundle.write_zip(out, data)
    trail_ids = [entry["trail_id"] for entry in listed]
    return MatterExport(Path(out), digest, trail_ids, len(left_out), size)


def _left_out(trail: Trail, reason: str) -> dict:
    return {"trail_id": str(trail.id), "job_id": str(trail.job_id), "reason": reason}


def _day(day: datetime.date | None) -> str | None:
    return day.isoformat() if day else None

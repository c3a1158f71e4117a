"""Producing a matter: every sealed trail of a selection (a matter's jobs, a date range of them)
in one bundle, with one manifest, one signed and cosigned checkpoint, and an inclusion proof per
trail against that checkpoint. `python -m audit.offline_verify` checks it whole.

The selection itself (which trails a matter's jobs have) is the serving side's to make
(decoding.selectors.matter_trail_ids): the audit store knows trails, not matters. What it
cannot prove is left out and named in matter.json, for a reason a verifier checks against the
log's leaves (matter_leaves.LEFT_OUT_REASONS): a trail still open, sealed after the newest
checkpoint, sealed without a request record (nothing binds it to the matter), or, of the
matter's other trails, outside the selection by its leaf's submission time or batch tag. A
trail whose leaf cannot show which it is refuses the export rather than be claimed. Nothing in
the bundle depends on when it was made, so exporting the same selection under the same
checkpoint rebuilds it byte for byte.
"""

from __future__ import annotations

import datetime
import json
import uuid
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from . import tiles
from .evidence import bundle, descriptive, matter_leaves
from .evidence.bundle_format import MATTER_FORMAT_VERSION
from .export import (
    ExportError,
    described,
    destructions_of,
    held_texts,
    listing,
    require_intact,
    signer,
    texts_of,
)
from .log import latest_checkpoint, log_size
from .models import DecisionRecord, LedgerEntry, Trail
from .receipts import receipt_signature
from .store import matter_key

CHUNK = 500  # trails read together


@dataclass(frozen=True)
class MatterSelection:
    """What was asked for: a matter and, optionally, the first and last day (UTC, inclusive)
    on which its jobs were submitted, and the batch whose lines they were."""

    matter: str
    since: datetime.date | None = None
    until: datetime.date | None = None
    batch: str | None = None

    def described(self) -> str:
        return descriptive.selection_of(self.doc())

    def doc(self) -> dict:
        """matter.json's matter, since, until and batch."""
        return {
            "matter": self.matter,
            "since": _day(self.since),
            "until": _day(self.until),
            "batch": self.batch,
        }

    def rule(self) -> matter_leaves.Selection:
        """The selection as a verifier holds a leaf to it."""
        return matter_leaves.Selection(_day(self.since), _day(self.until), self.batch)


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
    out: Path | str,
) -> MatterExport:
    """Write the bundle of the trails `trail_ids` (the selection's, every attempt) to `out`.
    `outside`: the matter's other trails, which its tags let an examiner find in the log, so
    those the checkpoint covers are listed as left out, each for the reason its leaf shows."""
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
            left_out.append(_left_out(trail, matter_leaves.OPEN))
        elif entry.seq >= size:
            left_out.append(_left_out(trail, matter_leaves.SEALED_AFTER))
        elif json.loads(entry.payload).get("matter_tag", "") is None:
            left_out.append(_left_out(trail, matter_leaves.NO_REQUEST))
        else:
            included.append((entry.seq, trail, entry))
    if not included:
        raise ExportError(
            f"{selection.described()}: no sealed trail that a signed checkpoint covers "
            f"({len(left_out)} left out)"
        )
    key = matter_key(selection.matter)  # made here for a matter whose trails predate the tags
    left_out += _outside(selection, key, outside, size, [entry for _, _, entry in included])
    included.sort(key=lambda item: item[0])  # log order
    require_intact([trail.id for _, trail, _ in included], selection.described())
    listed = [listing(trail, seq) for seq, trail, _ in included]
    matter_doc = {
        "format_version": MATTER_FORMAT_VERSION,
        **selection.doc(),
        "matter_key": key,
        "tree_size": size,
        "trails": listed,
        "left_out": left_out,
    }
    digest = bundle.write_matter_bundle(
        out,
        matter=matter_doc,
        trails=_evidence(selection, key, included, tiles.Tiles(size)),
        checkpoint_note=checkpoint.note,
        timestamp_token=checkpoint.timestamp_token,
        verifier_key=signer(checkpoint.note),
        receipt_signature=receipt_signature(checkpoint, sign=False),
    )
    trail_ids = [entry["trail_id"] for entry in listed]
    return MatterExport(Path(out), digest, trail_ids, len(left_out), size)


def _evidence(
    selection: MatterSelection, key: str, included: list, tree: tiles.Tiles
) -> Iterator[bundle.TrailEvidence]:
    """Each included trail's evidence, in log order, read a chunk at a time as the bundle is
    written; ExportError for a trail whose leaf cannot show it is of the selection."""
    for seq, trail, entry, rows, held, destruction in _read_in_chunks(included):
        records = [row[:4] for row in rows]  # (seq, prev_hash, record_hash, payload)
        submitted = json.loads(records[0][3]).get("submitted_at") if records else None
        if (
            selection.rule().holds(json.loads(entry.payload), key, submitted_at=submitted)
            is not True
        ):
            raise ExportError(
                f"{selection.described()}: nothing signed shows that trail {trail.id} is of it "
                "(it was sealed before leaves carried submission times and batch tags); produce "
                "the whole matter"
            )
        models, params = described(records)
        texts = texts_of(trail, rows, (), held=held)
        yield bundle.TrailEvidence(
            records, str(trail.id), trail.format_version, seq, entry.payload,
            tree.inclusion_proof(seq), texts, models, params, destruction,
        )  # fmt: skip


def _read_in_chunks(included: list) -> Iterator[tuple]:
    """(seq, trail, ledger entry, its records, the texts held for it, its destruction or None)
    for each trail, read CHUNK trails at a time in three queries (the records with their kinds
    and openings, the job rows' texts, the erasures), so a matter of 50,000 trails costs a few
    hundred reads, not four a trail."""
    for start in range(0, len(included), CHUNK):
        chunk = included[start : start + CHUNK]
        trails = [trail for _, trail, _ in chunk]
        rows: dict[uuid.UUID, list[tuple]] = defaultdict(list)
        found = (
            DecisionRecord.objects.filter(trail_id__in=[t.id for t in trails])
            .order_by("trail_id", "seq")
            .values_list(
                "trail_id", "seq", "prev_hash", "record_hash", "payload", "kind", "openings"
            )
        )
        for trail_id, *row in found.iterator(chunk_size=2000):
            rows[trail_id].append(tuple(row))
        held = held_texts(trails)
        destroyed = destructions_of([t.id for t in trails])
        for seq, trail, entry in chunk:
            yield (
                seq, trail, entry, rows[trail.id], held.get(trail.id, {}),
                destroyed.get(trail.id),
            )  # fmt: skip


def _outside(
    selection: MatterSelection,
    key: str,
    outside: Sequence[uuid.UUID],
    size: int,
    included: list[LedgerEntry],
) -> list[dict]:
    """The matter's trails outside the selection that the checkpoint covers, each left out for
    the reason its leaf shows; ExportError for one whose leaf cannot show it is outside (sealed
    before leaves carried submission times and batch tags), which no reason may hide."""
    rule = selection.rule()
    lines = [json.loads(e.payload).get("submitted_at") for e in included]
    first_line_at = min((t for t in lines if isinstance(t, str)), default=None)
    sealed_outside = LedgerEntry.objects.filter(trail_id__in=list(outside), seq__lt=size)
    trails = Trail.objects.in_bulk([e.trail_id for e in sealed_outside])
    entries = []
    for entry in sealed_outside.order_by("seq"):
        sealed, trail = json.loads(entry.payload), trails[entry.trail_id]
        if "matter_tag" not in sealed:
            continue  # sealed before the tags: no leaf of that time names its matter
        if sealed["matter_tag"] is None:
            entries.append(_left_out(trail, matter_leaves.NO_REQUEST))
        elif rule.holds(sealed, key, first_line_at=first_line_at) is False:
            entries.append(_left_out(trail, matter_leaves.OUTSIDE))
        else:
            raise ExportError(
                f"{selection.described()}: trail {entry.trail_id} of the matter was sealed "
                "before leaves carried submission times and batch tags, so nothing would show "
                "it outside the selection; produce a selection that includes it"
            )
    return entries


def _left_out(trail: Trail, reason: str) -> dict:
    return {"trail_id": str(trail.id), "job_id": str(trail.job_id), "reason": reason}


def _day(day: datetime.date | None) -> str | None:
    return day.isoformat() if day else None

"""Reads of the audit store that other apps share: a trail's decisions, its request and answer."""

from __future__ import annotations

import json
import uuid

from django.db.models import QuerySet

from .evidence import binding
from .models import DecisionRecord, Trail


def trail_decisions(*, trail_id: uuid.UUID) -> QuerySet[DecisionRecord]:
    """The trail's decision records (one per step), in step order."""
    return DecisionRecord.objects.filter(
        trail_id=trail_id, kind=DecisionRecord.Kind.DECISION
    ).order_by("seq")


def trail_decisions_since(*, trail_id: uuid.UUID, seq: int) -> tuple[list[dict], int]:
    """The decision payloads among the trail's records from `seq` on, in order, and the seq
    after the last record read (`seq` itself when there is none yet): where to read on from."""
    decisions = []
    rows = (
        DecisionRecord.objects.filter(trail_id=trail_id, seq__gte=seq)
        .order_by("seq")
        .values_list("seq", "kind", "payload")
    )
    for seq_read, kind, payload in rows:
        if kind == DecisionRecord.Kind.DECISION:
            decisions.append(json.loads(payload))
        seq = seq_read + 1
    return decisions, seq


def trail_decision(*, trail: Trail, step: int) -> dict | None:
    """Step `step`'s decision payload, or None if the trail has no such step."""
    record = (
        trail_decisions(trail_id=trail.id)
        .filter(seq=binding.decision_seq(trail.format_version, step))
        .only("payload")
        .first()
    )
    return json.loads(record.payload) if record is not None else None


def trail_record_of_kind(*, trail_id: uuid.UUID, kind: str) -> dict | None:
    """The trail's request or answer payload (v2), or None."""
    record = DecisionRecord.objects.filter(trail_id=trail_id, kind=kind).only("payload").first()
    return json.loads(record.payload) if record is not None else None

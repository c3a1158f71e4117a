"""Reads of the audit store that other apps share: a trail's decisions, its request and answer."""

from __future__ import annotations

import json
import uuid

from django.db.models import QuerySet

from .evidence import binding, sealing
from .models import DecisionRecord, Trail


def clear_payload(payload: str, openings: str = "") -> dict:
    """A record's payload as the service reads it: a format-3 decision opened with the slot
    values stored beside it (audit.evidence.sealing), any other record as hashed."""
    parsed = json.loads(payload)
    return sealing.open_decision(parsed, json.loads(openings)) if openings else parsed


def trail_decisions(*, trail_id: uuid.UUID) -> QuerySet[DecisionRecord]:
    """The trail's decision records (one per step), in step order."""
    return DecisionRecord.objects.filter(
        trail_id=trail_id, kind=DecisionRecord.Kind.DECISION
    ).order_by("seq")


def trail_decisions_since(*, trail_id: uuid.UUID, seq: int) -> tuple[list[dict], int]:
    """The decision payloads (clear) among the trail's records from `seq` on, in order, and the
    seq after the last record read (`seq` itself when there is none yet): where to read on from."""
    decisions = []
    rows = (
        DecisionRecord.objects.filter(trail_id=trail_id, seq__gte=seq)
        .order_by("seq")
        .values_list("seq", "kind", "payload", "openings")
    )
    for seq_read, kind, payload, openings in rows:
        if kind == DecisionRecord.Kind.DECISION:
            decisions.append(clear_payload(payload, openings))
        seq = seq_read + 1
    return decisions, seq


def trail_clear_decisions(*, trail_id: uuid.UUID) -> list[dict]:
    """The trail's decision payloads, clear (clear_payload), in step order."""
    rows = trail_decisions(trail_id=trail_id).values_list("payload", "openings")
    return [clear_payload(payload, openings) for payload, openings in rows.iterator(2000)]


def trail_decision(*, trail: Trail, step: int) -> dict | None:
    """Step `step`'s decision payload (clear), or None if the trail has no such step."""
    record = (
        trail_decisions(trail_id=trail.id)
        .filter(seq=binding.decision_seq(trail.format_version, step))
        .only("payload", "openings")
        .first()
    )
    return clear_payload(record.payload, record.openings) if record is not None else None


def trail_record_of_kind(*, trail_id: uuid.UUID, kind: str) -> dict | None:
    """The trail's request or answer payload (v2), or None."""
    record = DecisionRecord.objects.filter(trail_id=trail_id, kind=kind).only("payload").first()
    return json.loads(record.payload) if record is not None else None

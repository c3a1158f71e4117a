"""The evidence bundle of one trail: everything a court needs to check it without us."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

from django.conf import settings
from django.template.loader import render_to_string
from django.utils import timezone

from . import bundle
from .log import inclusion_of, signing_key
from .models import DecisionRecord, Trail
from .verification import verify_trails


class ExportError(Exception):
    pass


def trail_export(*, trail_id: uuid.UUID, out: Path | str) -> Path:
    trail = Trail.objects.filter(pk=trail_id).first()
    if trail is None:
        raise ExportError(f"trail {trail_id} does not exist")
    if trail.status != Trail.Status.SEALED:
        raise ExportError(f"trail {trail_id} is still open: export it once its job has ended")
    records = list(
        DecisionRecord.objects.filter(trail=trail)
        .order_by("seq")
        .values_list("seq", "prev_hash", "record_hash", "payload")
    )
    inclusion = inclusion_of(trail.id)
    report = verify_trails([trail.id], scope=f"trail {trail.id}")
    first = json.loads(records[0][3]) if records else {}
    verification = "\n".join(report.lines())
    readme = render_to_string(
        "audit/bundle_readme.txt",
        {
            "trail_id": trail.id,
            "job_id": trail.job_id,
            "attempt": trail.attempt,
            "record_count": len(records),
            "outcome": trail.outcome,
            "exported_at": timezone.now().isoformat(timespec="seconds"),
            "origin": settings.PATHFINDER_LOG_ORIGIN,
            "verification": verification,
        },
    )
    out = Path(out)
    bundle.write_bundle(
        out,
        records=records,
        trail_id=str(trail.id),
        ledger_index=inclusion.leaf_index,
        ledger_payload=inclusion.leaf_payload,
        proof=inclusion.proof,
        tree_size=inclusion.checkpoint.tree_size,
        checkpoint_note=inclusion.checkpoint.note,
        verifier_key=signing_key().verifier,
        models={"draft": first.get("draft"), "target": first.get("target")},
        params=first.get("params", {}),
        verification_text=verification + "\n",
        readme_text=readme,
    )
    return out

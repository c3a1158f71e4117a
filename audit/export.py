"""The evidence bundle of one trail: everything a court needs to check it without us."""

from __future__ import annotations

import json
import uuid
from collections.abc import Collection
from datetime import UTC
from pathlib import Path

from . import claims
from .evidence import binding, bundle, bundle_format, chain, checkpoints, decision_rule, sealing
from .evidence.bundle_format import TEXT_MEMBERS
from .evidence.tile_math import LogIncomplete
from .keys import signer_of
from .log import NotYetCovered, inclusion_of
from .models import DecisionRecord, Erasure, Trail
from .receipts import receipt_signature
from .verification import verify_trails

# What `withhold` may name, and the bound fields each covers.
WITHHOLDABLE = {
    "prompt": (binding.GIVEN, binding.RENDERED, binding.TOKEN_IDS),
    "answer": (binding.ANSWER_TEXT, binding.ANSWER_TOKEN_IDS),
}


class ExportError(Exception):
    pass


def regenerable(withhold: Collection[str]) -> str | None:
    """Why withholding these texts would hide nothing, or None. The request record discloses
    every parameter, the seed and every uniform draw included, and the model's identity: whoever
    holds the model and the prompt decodes the answer again, token for token. So the answer is
    withheld only with the prompt (docs/adr/0025)."""
    if "answer" in withhold and "prompt" not in withhold:
        return (
            "withhold answer: the disclosed prompt, the recorded parameters (the seed and every "
            "random draw included) and the model the bundle names regenerate the answer token "
            "for token, so a bundle withholding the answer alone hides it from no one who holds "
            "the model. Withhold the prompt too (--withhold prompt --withhold answer), or "
            "disclose the answer"
        )
    return None


def trail_export(*, trail_id: uuid.UUID, out: Path | str, withhold: Collection[str] = ()) -> Path:
    """Write the trail's bundle to `out`. `withhold` ("prompt", "answer") leaves those texts
    out: the bundle says they were withheld, and still verifies."""
    unknown = set(withhold) - WITHHOLDABLE.keys()
    if unknown:
        raise ExportError(f"withhold: {', '.join(sorted(unknown))} is not prompt or answer")
    pretended = regenerable(withhold)
    if pretended is not None:
        raise ExportError(pretended)
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
    try:
        inclusion = inclusion_of(trail.id)
    except (NotYetCovered, LogIncomplete) as exc:
        raise ExportError(str(exc)) from exc
    require_intact([trail.id], f"trail {trail.id}")
    models, params = described(records)
    payloads = [json.loads(record[3]) for record in records]
    for group in sorted(withhold) if trail.format_version < sealing.SEALED_SINCE else ():
        carried = carried_in_clear(payloads, group)
        if carried is not None:
            raise ExportError(
                f"withhold {group}: this trail's own records carry it in clear ({carried}), so "
                f"a bundle that withheld {group}.txt would still show it. Audit format "
                f"{trail.format_version} records cannot hide it; export without --withhold, or "
                "not at all"
            )
    texts = texts_of(trail, records, withhold)
    out = Path(out)
    bundle.write_bundle(
        out,
        records=records,
        trail_id=str(trail.id),
        format_version=trail.format_version,
        ledger_index=inclusion.leaf_index,
        ledger_payload=inclusion.leaf_payload,
        proof=inclusion.proof,
        tree_size=inclusion.checkpoint.tree_size,
        checkpoint_note=inclusion.checkpoint.note,
        timestamp_token=inclusion.checkpoint.timestamp_token,
        verifier_key=signer(inclusion.checkpoint.note),
        texts=texts,
        models=models,
        params=params,
        receipt_signature=receipt_signature(inclusion.checkpoint, sign=False),
        destruction=destructions_of([trail.id]).get(trail.id),
    )
    return out


def destructions_of(trail_ids: Collection[uuid.UUID]) -> dict[uuid.UUID, dict]:
    """Each of the trails whose texts were destroyed, with its destruction as the bundle's
    destruction.json states it (bundle_format.destruction_statement)."""
    return {
        erasure.trail_id: {
            "destroyed_at": erasure.erased_at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "destroyed_by": erasure.erased_by,
            "order": erasure.order,
        }
        for erasure in Erasure.objects.filter(trail_id__in=list(trail_ids))
    }


def require_intact(trail_ids: Collection[uuid.UUID], scope: str) -> None:
    """Refuse to export trails the store does not verify: the bundle's verification.txt states
    its claims as checked (audit.evidence.descriptive)."""
    report = verify_trails(trail_ids, scope=scope)
    if not report.ok:
        raise ExportError(
            "\n".join(["the store does not verify; nothing exported:", *report.lines()])
        )


def listing(trail: Trail, leaf_index: int) -> dict:
    """How a bundle lists a trail (a matter bundle's matter.json, the report)."""
    return {
        "trail_id": str(trail.id),
        "job_id": str(trail.job_id),
        "attempt": trail.attempt,
        "outcome": trail.outcome,
        "abandoned": trail.outcome == Trail.Outcome.ABANDONED,
        "leaf_index": leaf_index,
    }


def signer(note: str) -> str:
    try:
        return signer_of(note)
    except checkpoints.CheckpointError as exc:
        raise ExportError(f"no configured log key verifies the covering checkpoint: {exc}") from exc


def described(records) -> tuple[dict, dict]:
    """The models and parameters of a trail's stored records (bundle_format.described)."""
    return bundle_format.described(json.loads(records[0][3]) if records else None)


def carried_in_clear(payloads: list[dict], group: str) -> str | None:
    """Where a trail's records show the text `group` names in clear, or None: decisions record
    token ids and their text, so an emitted token is the answer's, and a draft copied from the
    context's prompt part (prompt lookup) or from another job is that prompt's or job's text."""
    request = next((p for p in payloads if binding.kind_of(p) == binding.REQUEST), {})
    prompt_tokens = (request.get("prompt") or {}).get("token_count", 0)
    for payload in payloads:
        if binding.kind_of(payload) != binding.DECISION:
            continue
        step = payload.get("step")
        if group == "answer" and payload.get("emitted"):
            return f"step {step} emitted the answer's tokens"
        source = payload.get("draft_source") or {}
        if group == "prompt" and source:
            if source.get("reference") != decision_rule.CONTEXT:
                return f"step {step} drafted tokens copied from another job"
            if source.get("offset", 0) < prompt_tokens:
                return f"step {step} drafted tokens copied from the prompt"
    return None


def texts_of(
    trail: Trail, records, withhold: Collection[str], *, held: dict[str, str] | None = None
) -> bundle.Texts:
    """The bound texts the service holds for the trail, each disclosed with its own salt, or
    declared withheld (asked to, or not held: a trail no job row points at any more). `records`
    are (seq, prev_hash, record_hash, payload[, kind, openings]) rows in seq order; `held`, the
    texts held for it (held_texts), when the caller read them for many trails at once."""
    if trail.format_version < 2:
        return bundle.NO_TEXTS
    payloads = [json.loads(record[3]) for record in records]
    request = payloads[0] if payloads and binding.kind_of(payloads[0]) == binding.REQUEST else {}
    answer = payloads[-1] if payloads and binding.kind_of(payloads[-1]) == binding.ANSWER else None
    bound = list((request.get("prompt") or {}).get("digests") or {})
    if answer is not None:
        bound.extend(binding.answer_digests(answer))
    held = held_texts([trail]).get(trail.id, {}) if held is None else held
    hidden = {name for group in withhold for name in WITHHOLDABLE[group]}
    disclosures: dict[str, dict] = {}
    for name in bound:
        if name in hidden or name not in held:
            disclosures[name] = {"withheld": True}
            continue
        disclosures[name] = {"salt": binding.field_salt(trail.salt, name)}
        if name not in TEXT_MEMBERS:
            disclosures[name]["value"] = json.loads(held[name])

    if trail.format_version >= sealing.SEALED_SINCE:
        answered = "salt" in disclosures.get(binding.ANSWER_TEXT, {})
        # Asked to, or not held (a trail no job row points at any more): withheld either way.
        everything = all("salt" in entry for entry in disclosures.values())
        opened = _slot_openings(trail, records, answered=answered, everything=everything)
        disclosures.update(opened)

    def member(name: str) -> str:
        return held[name] if "salt" in disclosures.get(name, {}) else ""

    return bundle.Texts(disclosures, member(binding.RENDERED), member(binding.ANSWER_TEXT))


def _slot_openings(trail: Trail, records, *, answered: bool, everything: bool) -> dict[str, dict]:
    """The slots of a format-3 or 4 trail's decisions that a bundle opens, each with its salt
    and value.

    Format 3: the emitted tokens and their alternatives with the answer (`answered`); the drafts
    and corrections that were not emitted only when nothing is withheld (`everything`), since
    the context they come from is the prompt and the answer, and never a draft copied from
    another job, which is that job's text.

    Format 4: a decision's workings only when nothing is withheld, and never those of a step
    that copied its draft from another job: every number in them derives from the context, and
    from the other job's text (docs/adr/0026)."""
    opened: dict[str, dict] = {}
    if records and len(records[0]) > 4:  # the rows carry each record's kind and openings
        rows = [(r[3], r[5]) for r in records if r[4] == DecisionRecord.Kind.DECISION]
    else:
        decisions = DecisionRecord.objects.filter(trail=trail, kind=DecisionRecord.Kind.DECISION)
        rows = decisions.order_by("seq").values_list("payload", "openings")
    for payload, openings in rows:
        sealed, values = json.loads(payload), json.loads(openings or "{}")
        emitted = set(sealing.emitted_slots(sealed))
        source = sealing.open_decision(sealed, values).get("draft_source") or {}
        copied_elsewhere = source.get("reference", decision_rule.CONTEXT) != decision_rule.CONTEXT
        for name, value in values.items():
            if name.endswith("." + sealing.WORKINGS):
                shown = everything and not copied_elsewhere
            elif name in emitted or ".top." in name:
                shown = answered
            else:
                shown = everything and not (copied_elsewhere and ".drafted." in name)
            if shown:
                opened[name] = {"salt": sealing.slot_salt(trail.salt, name), "value": value}
    return opened


def held_texts(trails: Collection[Trail]) -> dict[uuid.UUID, dict[str, str]]:
    """The texts the service holds for each of the trails, in one read of the job rows: a
    trail's are its job's while the job's row points at it (else it has none here)."""
    source = claims.source()
    found = source.for_trails([str(t.id) for t in trails]) if source is not None else []
    by_trail = {(claim.trail_id, claim.job_id): claim for claim in found}
    texts_by: dict[uuid.UUID, dict[str, str]] = {}
    for trail in trails:
        claim = by_trail.get((str(trail.id), str(trail.job_id)))
        if claim is None or claim.destroyed:
            continue
        texts = claim.question.texts()
        if claim.answer is not None:
            texts[binding.ANSWER_TEXT] = claim.answer.text
            texts[binding.ANSWER_TOKEN_IDS] = chain.canonical_json(list(claim.answer.token_ids))
        texts_by[trail.id] = texts
    return texts_by

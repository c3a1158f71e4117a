"""Replay: re-run a recorded job and compare every decision field with its trail.

Randomness is keyed by (seed, step, position) in trails of formats 2 to 4 and by (seed, output
position) in format 5 (coupled sampling: the replay runs the trail's own rule), and the draft
length of each step is taken from the record, so with the same model identities every field but
the timings must come out the same (invariant 4). The replay writes no trail of its own: it
releases no output.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
import uuid

import numpy as np
from django.conf import settings
from django.utils import timezone

from audit.evidence.chain import canonical_json
from audit.models import Trail
from audit.selectors import trail_clear_decisions
from decoding.engine import (
    AuditSink,
    Draft,
    Drafter,
    DraftSource,
    PromptLookupDrafter,
    ReplayOverrun,
    ReplaySchedule,
    SpeculativeDecoder,
    StepRecord,
)
from decoding.models import GenerationJob, Replay
from decoding.services import replayable
from decoding.text import StopStrings
from decoding.worker import runtime
from decoding.worker.execution import request_for

logger = logging.getLogger(__name__)

RENEW_EVERY_S = 2.0

# Wall-clock timings may differ; the record format ("v", "kind") is not a decision, so a v1
# trail replays under v2 code.
VOLATILE_FIELDS = frozenset({"timings_us", "v", "kind"})
# Fields records gained later: a recording without one cannot differ in it.
ADDED_FIELDS = frozenset({"draft_source", "logprobs"})
# Causes before effects: a changed model identity is named before the decisions it changed.
FIELD_ORDER = (
    "request_id", "step", "rule", "draft", "target", "params", "context_length",
    "draft_length", "drafted", "accepted_count", "correction", "emitted", "emitted_text", "stop",
    "rationale",
)  # fmt: skip


class SourceMismatch(Exception):
    """A recorded draft is not what its recorded source holds at the recorded offset."""


class RecordedDrafts(Drafter):
    """A copying drafter's recorded drafts, step by step, each checked against its source.

    A copying drafter may have copied from an earlier job this worker remembered, which a replay
    elsewhere would not; so the replay proposes what the record says was drafted and checks it
    is what the named source (the context, or that job's prompt and output) holds at the
    offset. The target's decisions about those drafts are then re-derived as ever.
    """

    def __init__(self, drafter: Drafter, recorded: list[dict], sources: dict[str, list[int]]):
        self.identity, self.vocab_size = drafter.identity, drafter.vocab_size
        self._recorded, self._sources = recorded, sources

    def propose(self, context, k, params, *, seed: int, step: int, position=None) -> Draft:
        record = self._recorded[step] if step < len(self._recorded) else {}
        tokens = np.array([d["token"] for d in record.get("drafted", [])][:k], dtype=np.int64)
        given = record.get("draft_source")
        if given is None:
            return Draft.one_hot(tokens, self.vocab_size)
        source = DraftSource(given["reference"], given["offset"], given["match_length"])
        held = (
            list(context) if source.reference == "context" else self._sources.get(source.reference)
        )
        if held is None or held[source.offset : source.offset + len(tokens)] != tokens.tolist():
            raise SourceMismatch(
                f"step {step}'s draft is not what {source.reference} holds at {source.offset}"
            )
        return Draft.one_hot(tokens, self.vocab_size, source)


def _drafter_for(models, job: GenerationJob, recorded: list[dict]) -> Drafter:
    if not isinstance(models.drafter, PromptLookupDrafter):
        return models.job_drafter(job.matter_id)  # a draft model drafts the same way again
    named = {(record.get("draft_source") or {}).get("reference") for record in recorded} - {
        None,
        "context",
    }
    sources = {
        str(other.id): [*other.prompt_token_ids, *other.output_token_ids]
        for other in GenerationJob.objects.filter(matter_id=job.matter_id, id__in=named)
    }
    return RecordedDrafts(models.drafter, recorded, sources)


class _Collect(AuditSink):
    """An in-memory sink: a replay's records are compared, never stored."""

    def __init__(self) -> None:
        self.records: list[StepRecord] = []

    def record(self, record: StepRecord) -> None:
        self.records.append(record)


def replay_run(*, replay_id: uuid.UUID) -> None:
    claimed = Replay.objects.filter(pk=replay_id, status=Replay.Status.QUEUED).update(
        status=Replay.Status.RUNNING, lease_expires_at=_lease_until()
    )
    if not claimed:
        return
    replay = Replay.objects.select_related("job__model_spec").get(pk=replay_id)
    try:
        steps, first = replay_decisions(
            job=replay.job, trail_id=replay.trail_id, cancelled=_renew(replay_id)
        )
    except Exception as exc:
        logger.exception("replay failed", extra={"replay_id": str(replay_id)})
        Replay.objects.filter(pk=replay_id).update(
            status=Replay.Status.FAILED, error=str(exc), finished_at=timezone.now()
        )
        return
    Replay.objects.filter(pk=replay_id).update(
        status=Replay.Status.DONE,
        identical=first is None,
        steps_compared=len(steps),
        first_divergence=first,
        steps=steps,
        finished_at=timezone.now(),
    )


def replay_decisions(
    *, job: GenerationJob, trail_id: uuid.UUID | None = None, cancelled=None
) -> tuple[list[dict], dict | None]:
    """Re-run a finished job alone, in this process, under the draft lengths its records state,
    and compare every step with its trail (`trail_id`, default the job's): the per-step verdicts
    and the first divergence (None when identical). `cancelled` is the decoder's check between
    steps."""
    if not replayable(job):
        raise ValueError("only a finished job with a trail can be replayed")
    trail_id = trail_id or job.trail_id
    recorded = trail_clear_decisions(trail_id=trail_id)
    format_version = Trail.objects.values_list("format_version", flat=True).get(pk=trail_id)
    models, _ = runtime.models_for(job.model_spec)
    sink = _Collect()
    # Behind the job's wall, as the job ran: its matter's cache only (decoding.worker.runtime).
    target = models.target.walled(job.matter_id)
    decoder = SpeculativeDecoder(
        _drafter_for(models, job, recorded), target, sink, tokenizer=models.tokenizer
    )
    schedule = ReplaySchedule([record["draft_length"] for record in recorded])
    stop = StopStrings(models.tokenizer, job.stop) if job.stop else None
    overran = False
    try:
        decoder.generate(
            request_for(job, format_version=format_version),
            schedule=schedule,
            stop=stop,
            cancelled=cancelled or _never,
        )
    except ReplayOverrun:
        # The replay wanted a step the recording does not have. A failed job's trail ends
        # early by design; a succeeded one's must not.
        overran = job.status == GenerationJob.Status.SUCCEEDED
    replayed = [record.payload() for record in sink.records]
    if overran:
        replayed.append({"step": len(recorded), "<note>": "the replay went on"})
    return compare(recorded, replayed)


def _never() -> bool:
    return False


def _lease_until():
    return timezone.now() + dt.timedelta(seconds=settings.PATHFINDER_JOB_LEASE_S)


def _renew(replay_id: uuid.UUID):
    """The decoder's check between steps: renew the replay's lease (at most every few seconds);
    a replay is never cancelled."""
    last = time.monotonic()

    def renew() -> bool:
        nonlocal last
        if time.monotonic() - last >= RENEW_EVERY_S:
            last = time.monotonic()
            Replay.objects.filter(pk=replay_id).update(lease_expires_at=_lease_until())
        return False

    return renew


def replays_fail_lost() -> int:
    """Fail the running replays whose lease lapsed (their worker died): the reviewer sees why
    and may start the replay again. Returns how many."""
    lost = Replay.objects.filter(
        status=Replay.Status.RUNNING, lease_expires_at__lt=timezone.now()
    ).update(
        status=Replay.Status.FAILED,
        error="the worker running the replay was lost; start it again",
        finished_at=timezone.now(),
    )
    if lost:
        logger.warning("replays whose worker was lost failed", extra={"replays": lost})
    return lost


def compare(recorded: list[dict], replayed: list[dict]) -> tuple[list[dict], dict | None]:
    """Per-step verdicts and the first divergence (step, field, both values)."""
    steps, first = [], None
    for step in range(max(len(recorded), len(replayed))):
        if step >= len(recorded) or step >= len(replayed):
            missing = "recorded" if step >= len(recorded) else "replayed"
            verdict = {"step": step, "identical": False, "fields": ["<step>"]}
            divergence = {
                "step": step,
                "field": "<step>",
                "recorded": None if missing == "recorded" else "present",
                "replayed": None if missing == "replayed" else "present",
            }
        else:
            fields = differing_fields(recorded[step], replayed[step])
            verdict = {"step": step, "identical": not fields, "fields": fields}
            divergence = (
                {
                    "step": step,
                    "field": fields[0],
                    "recorded": _shown(recorded[step].get(fields[0])),
                    "replayed": _shown(replayed[step].get(fields[0])),
                }
                if fields
                else None
            )
        steps.append(verdict)
        if first is None and divergence is not None:
            first = divergence
    return steps, first


def differing_fields(recorded: dict, replayed: dict) -> list[str]:
    keys = sorted(
        (recorded.keys() | replayed.keys()) - VOLATILE_FIELDS,
        key=lambda key: (FIELD_ORDER.index(key) if key in FIELD_ORDER else len(FIELD_ORDER), key),
    )
    replayed = {**replayed, **{key: _as_recorded(recorded, replayed, key) for key in IDENTITIES}}
    keys = [key for key in keys if key in recorded or key not in ADDED_FIELDS]
    if _warped_top(recorded):  # ranked by another distribution than a replay ranks them now
        keys = [key for key in keys if key != "target_top"]
    if recorded.get("v", 1) < RATIONALE_WORDED_SINCE:  # worded with token ids, as then
        keys = [key for key in keys if key != "rationale"]
    return [
        key
        for key in keys
        if canonical_json(recorded.get(key)) != canonical_json(replayed.get(key))
    ]


IDENTITIES = ("draft", "target")
# Format 3's rationale names no token (its tokens are sealed); older records' sentences did.
RATIONALE_WORDED_SINCE = 3


def _warped_top(recorded: dict) -> bool:
    """Whether a recording's alternatives are the warped distribution's ({"token", "p"}), as
    records held them before they held the model's own logprobs (docs/adr/0019)."""
    tops = recorded.get("target_top") or []
    return any("p" in alt for position in tops for alt in position)


def _as_recorded(recorded: dict, replayed: dict, key: str):
    """A model identity as the recording could state it: a trail recorded before identities
    hashed the tokenizer, config and chat template has no such fields, which cannot differ."""
    mine, theirs = recorded.get(key), replayed.get(key)
    if not isinstance(mine, dict) or not isinstance(theirs, dict):
        return theirs
    return {name: value for name, value in theirs.items() if name in mine}


def _shown(value) -> str:
    text = canonical_json(value)
    return text if len(text) <= 500 else text[:500] + "…"

"""What a job row claims, in audit.evidence.binding's terms: the question it asked and the answer it
serves. The worker writes the trail's request and answer records from these, and every verifier
compares the row with those records, so there is one home for how a job maps onto its trail."""

from __future__ import annotations

from collections.abc import Collection, Iterator
from types import SimpleNamespace

import orjson
from django.db.models import TextField
from django.db.models.functions import Cast

from audit.dbtext import canonical, uuid_text
from audit.evidence import binding, matter_leaves
from audit.models import Trail
from decoding.engine import PARAM_NAMES, GenerationParams, ResponseFormat, params_payload
from decoding.engine.grammar import LIBRARY as GRAMMAR_LIBRARY
from decoding.models import GenerationJob


def job_served(job: GenerationJob) -> bool:
    """Whether the job served an answer: its result was written (a stop reason, with the seal
    of the trail that recorded it). A job cancelled before it ran, or whose worker was lost and
    which was then cancelled, served none."""
    served = (GenerationJob.Status.SUCCEEDED, GenerationJob.Status.CANCELLED)
    return job.status in served and bool(job.stop_reason)


def job_generation_params(job: GenerationJob) -> GenerationParams:
    return GenerationParams(**{name: getattr(job, name) for name in PARAM_NAMES})


def job_question(job: GenerationJob) -> binding.Question:
    """The request as the model saw it: what the caller sent, the text that was tokenised, the
    token ids, and every generation parameter with the stop strings."""
    if job.messages is not None:
        kind, given = "messages", job.messages
    elif job.prompt_text:
        kind, given = "prompt", job.prompt_text
    else:
        kind, given = "prompt_token_ids", list(job.prompt_token_ids)
    params = {
        **params_payload(job_generation_params(job)),
        "stop": list(job.stop),
        "stream": job.stream,
    }
    return binding.Question(
        given_kind=kind,
        given=given,
        rendered=job.prompt_text,
        token_ids=tuple(job.prompt_token_ids),
        params=params,
    )


def job_direction(job: GenerationJob) -> dict:
    """Who directed the job, under what designation (binding.direction)."""
    key = job.api_key
    return binding.direction(
        key=key.name if key is not None else None,
        key_owner=key.owner if key is not None else None,
        directed_by=job.directed_by,
        designation=job.designation,
    )


def job_batch_line(job: GenerationJob) -> dict | None:
    """The Batch API line the job was (binding.batch_line), or None for a job that is no line."""
    line = getattr(job, "batch_line", None)  # the reverse one-to-one raises when there is none
    if line is None:
        return None
    return binding.batch_line(batch=line.batch_id, line=line.line, custom_id=line.custom_id)


def job_claim(job: GenerationJob) -> binding.Claim:
    answer = None
    if job_served(job):
        answer = binding.Answer(
            token_ids=tuple(job.output_token_ids),
            text=job.output_text,
            stop_reason=job.stop_reason,
        )
    return binding.Claim(
        job_id=str(job.id),
        trail_id=str(job.trail_id),
        attempt=job.attempts,
        matter=job.matter.name,
        request_id=job.request_id,
        model_spec=job.model_spec.name,
        question=job_question(job),
        answer=answer,
        submitted_at=matter_leaves.utc_time(job.created_at),
        destroyed=job.destroyed_at is not None,
        direction=job_direction(job),
        grammar=job_grammar(job),
        batch_line=job_batch_line(job),
    )


def job_request_payload(job: GenerationJob, trail, models) -> dict:
    """The trail's first record: the request as the loaded models will see it."""
    return binding.request_payload(
        trail_salt=trail.salt,
        job_id=str(job.id),
        matter=job.matter.name,
        request_id=job.request_id,
        attempt=trail.attempt,
        previous_trail=str(trail.previous_id) if trail.previous_id else None,
        model_spec=job.model_spec.name,
        models={
            "draft": models.drafter.identity.as_payload(),
            "target": models.target.identity.as_payload(),
        },
        question=job_question(job),
        submitted_at=matter_leaves.utc_time(job.created_at),
        direction=job_direction(job),
        grammar=_grammar_statement(job, trail.salt),
        batch_line=job_batch_line(job),
        format_version=trail.format_version,
    )


def job_grammar(job: GenerationJob) -> dict | None:
    """A structured-output job's grammar as binding.grammar() takes it (None without one)."""
    response_format = ResponseFormat.from_stored(job.response_format)
    if response_format is None:
        return None
    return {
        "kind": response_format.type,
        "strict": response_format.strict,
        "library": GRAMMAR_LIBRARY,
        "schema": response_format.schema_text(),
        "compiled": response_format.grammar(),
    }


def _grammar_statement(job: GenerationJob, trail_salt: str) -> dict | None:
    """What the request record says of the job's grammar (binding.grammar)."""
    texts = job_grammar(job)
    return None if texts is None else binding.grammar(trail_salt=trail_salt, **texts)


# What a claim reads of a job row (job_claim, job_question), and nothing more.
_CLAIMED_FIELDS = (
    "id",
    "trail_id",
    "attempts",
    "matter__name",
    "request_id",
    "model_spec__name",
    "messages",
    "prompt_text",
    "prompt_token_ids",
    "stop",
    "stream",
    "status",
    "stop_reason",
    "output_token_ids",
    "output_text",
    "created_at",
    "destroyed_at",
    "directed_by",
    "designation",
    "api_key__name",
    "api_key__owner",
    "response_format",
    "batch_line__batch_id",
    "batch_line__line",
    "batch_line__custom_id",
    *PARAM_NAMES,
)


# Read as text: the ids (compared as text), the JSON fields (parsed with orjson).
_AS_TEXT = ("id", "trail_id", "messages", "prompt_token_ids", "stop", "output_token_ids")
_JSON_FIELDS = frozenset(_AS_TEXT[2:])


class _ClaimedRow(SimpleNamespace):
    """A job row read as values, with the attributes job_claim reads of a GenerationJob."""

    def __init__(self, row: dict):
        fields = {name: value for name, value in row.items() if "__" not in name}
        for name in _AS_TEXT:
            text = fields.pop(f"{name}_text")
            if name in _JSON_FIELDS:
                fields[name] = orjson.loads(text) if text is not None else None
            else:
                fields[name] = canonical(text)
        key = line = None
        if row["api_key__name"] is not None:
            key = SimpleNamespace(name=row["api_key__name"], owner=row["api_key__owner"])
        if row["batch_line__batch_id"] is not None:
            line = SimpleNamespace(
                batch_id=row["batch_line__batch_id"],
                line=row["batch_line__line"],
                custom_id=row["batch_line__custom_id"],
            )
        super().__init__(
            **fields,
            matter=SimpleNamespace(name=row["matter__name"]),
            model_spec=SimpleNamespace(name=row["model_spec__name"]),
            api_key=key,
            batch_line=line,
        )


class JobClaims:
    """The claims source audit.verification reads (registered in decoding.apps)."""

    def for_trails(self, trail_ids: Collection[str]) -> list[binding.Claim]:
        # Rows as text, not model instances: this runs for every job on every verification.
        plain = [name for name in _CLAIMED_FIELDS if name not in _AS_TEXT]
        texts = {
            f"{name}_text": Cast(name, TextField()) if name in _JSON_FIELDS else uuid_text(name)
            for name in _AS_TEXT
        }
        rows = GenerationJob.objects.filter(trail_id__in=list(trail_ids)).values(*plain, **texts)
        return [job_claim(_ClaimedRow(row)) for row in rows]

    def dangling(self) -> Iterator[tuple[str, str]]:
        # One anti-join in the database, not every job's pointer brought here.
        rows = (
            GenerationJob.objects.filter(trail_id__isnull=False)
            .exclude(trail_id__in=Trail.objects.values("id"))
            .values_list("id", "trail_id")
        )
        for job_id, trail_id in rows.iterator(chunk_size=2000):
            yield str(job_id), str(trail_id)

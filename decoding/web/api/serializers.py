"""Input validation and output shapes for the native API. No business logic here."""

import json

from django.conf import settings
from django.urls import reverse
from rest_framework import serializers

from audit.selectors import clear_payload
from decoding.engine.params import MAX_SEED, MAX_TOP_LOGPROBS
from decoding.models import GenerationJob
from decoding.selectors import job_answer, trail_for_job
from decoding.web.api.fields import (
    RefusesUnknownFields,
    StrictCharField,
    StrictFloatField,
    StrictIntegerField,
    text_refusal,
)

MAX_STOP_STRINGS = 4
# A stop string longer than any answer could never match; this bounds the work of looking.
MAX_STOP_STRING_CHARS = 256


class TokenIdsField(serializers.ListField):
    """Token ids, at most PATHFINDER_MAX_PROMPT_TOKENS of them, counted before any is checked."""

    def __init__(self, **kwargs):
        super().__init__(child=StrictIntegerField(min_value=0), allow_empty=False, **kwargs)

    def to_internal_value(self, data):
        limit = settings.PATHFINDER_MAX_PROMPT_TOKENS
        if isinstance(data, list) and len(data) > limit:
            raise serializers.ValidationError(f"At most {limit} token ids.")
        return super().to_internal_value(data)


class ChatMessage(RefusesUnknownFields, serializers.Serializer):
    role = serializers.ChoiceField(choices=["system", "user", "assistant"])
    content = StrictCharField(allow_blank=True, trim_whitespace=False)


class StopField(serializers.Field):
    """A string or a list of up to four non-empty strings, as OpenAI accepts."""

    def to_internal_value(self, data):
        items = [data] if isinstance(data, str) else data
        if not isinstance(items, list) or not all(isinstance(i, str) and i for i in items):
            raise serializers.ValidationError("Must be a non-empty string or a list of them.")
        if len(items) > MAX_STOP_STRINGS:
            raise serializers.ValidationError(f"At most {MAX_STOP_STRINGS} stop strings.")
        if any(len(item) > MAX_STOP_STRING_CHARS for item in items):
            raise serializers.ValidationError(
                f"Each stop string has at most {MAX_STOP_STRING_CHARS} characters."
            )
        refusal = next(filter(None, map(text_refusal, items)), None)
        if refusal:
            raise serializers.ValidationError(refusal)
        return items

    def to_representation(self, value):
        return value


class GenerationInput(RefusesUnknownFields, serializers.Serializer):
    """A generation request. Its model, prompt and limits are checked when the job is
    submitted, the same way for every client."""

    # Shape checks only (types and ranges); every other rule is the service's
    # (decoding.job_input), so `manage.py generate` refuses what this API refuses.

    model = StrictCharField(max_length=100, required=False)
    prompt = StrictCharField(required=False, allow_blank=False, trim_whitespace=False)
    messages = ChatMessage(many=True, required=False, allow_empty=False)
    prompt_token_ids = TokenIdsField(required=False)
    stop = StopField(required=False)
    max_tokens = StrictIntegerField(min_value=1, required=False)
    temperature = StrictFloatField(min_value=0.0, max_value=2.0, required=False)
    top_k = StrictIntegerField(min_value=0, required=False)
    top_p = StrictFloatField(min_value=0.0, max_value=1.0, required=False)
    seed = StrictIntegerField(min_value=0, max_value=MAX_SEED, required=False)
    draft_length = StrictIntegerField(min_value=0, required=False)
    eos_token_id = StrictIntegerField(min_value=0, required=False, allow_null=True)
    top_logprobs = StrictIntegerField(
        min_value=0,
        max_value=MAX_TOP_LOGPROBS,
        required=False,
        help_text="How many of the target's most probable tokens each decision record keeps "
        "per emitted token (up to the model spec's top_logprobs); 0: none",
    )
    response_format = serializers.JSONField(
        required=False,
        allow_null=True,
        help_text='Structured outputs, as OpenAI\'s: {"type": "json_object"} or {"type": '
        '"json_schema", "json_schema": {"name", "schema", "strict"}}; the output is decoded '
        'under that grammar. {"type": "text"} or null: unconstrained',
    )
    request_id = StrictCharField(max_length=128, required=False, allow_blank=False)
    directed_by = StrictCharField(
        max_length=200,
        required=False,
        allow_blank=False,
        help_text="Who directed this request (the reviewer, counsel): stated in its trail's "
        "request record, in clear",
    )
    designation = StrictCharField(
        max_length=200,
        required=False,
        allow_blank=False,
        help_text='Its confidentiality designation (e.g. "attorney work product"): stated in '
        "its trail's request record, in clear",
    )

    def validate_top_p(self, value):
        if value <= 0:
            raise serializers.ValidationError("Ensure this value is greater than 0.")
        return value

    def validate_response_format(self, value):
        if value is not None and not isinstance(value, dict):
            raise serializers.ValidationError("Must be an object with a 'type'.")
        return value


class GenerationFilter(serializers.Serializer):
    status = serializers.ChoiceField(choices=GenerationJob.Status.choices, required=False)
    created_after = serializers.DateTimeField(required=False)
    created_before = serializers.DateTimeField(required=False)

    def to_internal_value(self, data):
        known = {*self.fields, "cursor", "limit"}
        unknown = sorted(set(data) - known)
        if unknown:
            raise serializers.ValidationError({unknown[0]: ["Unknown query parameter."]})
        return super().to_internal_value(data)


class GenerationOutput(serializers.Serializer):
    def to_representation(self, job):
        trail = trail_for_job(job)
        answer = None if job.destroyed_at else job_answer(job)
        return {
            "id": str(job.id),
            "request_id": job.request_id,
            "directed_by": job.directed_by or None,
            "designation": job.designation or None,
            "matter": job.matter.name,
            "model": job.model_spec.name,
            "status": job.status,
            "error": job.error or None,
            "failure": job.failure or None,
            "prompt_token_ids": job.prompt_token_ids,
            "stop": job.stop,
            "params": {
                "max_tokens": job.max_tokens,
                "temperature": job.temperature,
                "top_k": job.top_k,
                "top_p": job.top_p,
                "seed": job.seed,
                "draft_length": job.draft_length,
                "eos_token_id": job.eos_token_id,
                "top_logprobs": job.top_logprobs,
            },
            "response_format": json.loads(job.response_format) if job.response_format else None,
            "output_text": answer.text if answer else "",
            "output_token_ids": list(answer.token_ids) if answer else [],
            "stop_reason": answer.stop_reason if answer else None,
            "steps": job.steps,
            "drafted": job.drafted,
            "accepted": job.accepted,
            "acceptance_rate": round(job.acceptance_rate, 6),
            "mean_accepted_length": round(job.mean_accepted_length, 6),
            "latency_ms": job.latency_ms,
            "timings": {
                "queue_ms": job.queue_ms,
                "load_ms": job.load_ms,
                "prefill_ms": job.prefill_ms,
                "cached_prompt_tokens": job.cached_prompt_tokens,
                "decode_ms": job.decode_ms,
                "audit_ms": job.audit_ms,
            },
            "created_at": job.created_at,
            "started_at": job.started_at,
            "finished_at": job.finished_at,
            "attempts": job.attempts,
            "stream": job.stream,
            "cancel_requested_at": job.cancel_requested_at,
            "metrics": job.metrics or None,
            "destroyed": {"at": job.destroyed_at, "order": job.destroyed_under}
            if job.destroyed_at
            else None,
            "trail": None
            if trail is None
            else {
                "id": str(trail.id),
                "status": trail.status,
                "records": trail.record_count,
                "head_hash": trail.head_hash,
                "url": reverse("generation-trail", args=[job.id]),
            },
        }


class DecisionRecordOutput(serializers.Serializer):
    def to_representation(self, record):
        return {
            "seq": record.seq,
            "kind": record.kind,
            "prev_hash": record.prev_hash,
            "record_hash": record.record_hash,
            "payload": record.payload,  # the exact text that was hashed
            # Clear: a format-3 decision's tokens opened for the job's own caller.
            "decision": clear_payload(record.payload, record.openings),
            "created_at": record.created_at,
        }

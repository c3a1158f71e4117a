"""Input validation and output shapes for the native API. No business logic here."""

import json
import math

from django.conf import settings
from django.urls import reverse
from rest_framework import serializers

from decoding import runtime
from decoding.selectors import trail_for_job

MAX_SEED = 2**53 - 1  # seeds travel in canonical JSON, whose integers stop at 2**53 - 1


class StrictFloatField(serializers.FloatField):
    def to_internal_value(self, data):
        value = super().to_internal_value(data)
        if not math.isfinite(value):
            raise serializers.ValidationError("Must be a finite number.")
        return value


class GenerationInput(serializers.Serializer):
    prompt_token_ids = serializers.ListField(
        child=serializers.IntegerField(min_value=0), allow_empty=False
    )
    max_tokens = serializers.IntegerField(min_value=1, default=16)
    temperature = StrictFloatField(min_value=0.0, max_value=2.0, default=1.0)
    top_k = serializers.IntegerField(min_value=0, default=0)
    top_p = StrictFloatField(min_value=0.0, max_value=1.0, default=1.0)
    seed = serializers.IntegerField(min_value=0, max_value=MAX_SEED, required=False)
    draft_length = serializers.IntegerField(min_value=0, required=False)
    eos_token_id = serializers.IntegerField(min_value=0, required=False, allow_null=True)
    request_id = serializers.CharField(max_length=128, required=False, allow_blank=False)

    def to_internal_value(self, data):
        if isinstance(data, dict):
            unknown = sorted(set(data) - set(self.fields))
            if unknown:
                raise serializers.ValidationError({unknown[0]: ["Unknown field."]})
        return super().to_internal_value(data)

    def validate_prompt_token_ids(self, value):
        limit = settings.PATHFINDER_MAX_PROMPT_TOKENS
        if len(value) > limit:
            raise serializers.ValidationError(f"At most {limit} tokens; got {len(value)}.")
        _check_in_vocabulary(value)
        return value

    def validate_max_tokens(self, value):
        limit = settings.PATHFINDER_MAX_OUTPUT_TOKENS
        if value > limit:
            raise serializers.ValidationError(
                f"Ensure this value is less than or equal to {limit}."
            )
        return value

    def validate_top_p(self, value):
        if value <= 0:
            raise serializers.ValidationError("Ensure this value is greater than 0.")
        return value

    def validate_draft_length(self, value):
        limit = settings.PATHFINDER_MAX_DRAFT_LENGTH
        if value > limit:
            raise serializers.ValidationError(
                f"Ensure this value is less than or equal to {limit}."
            )
        return value

    def validate_eos_token_id(self, value):
        if value is not None:
            _check_in_vocabulary([value])
        return value

    def validate(self, attrs):
        attrs.setdefault("draft_length", settings.PATHFINDER_DEFAULT_DRAFT_LENGTH)
        return attrs


def _check_in_vocabulary(token_ids):
    vocab_size = runtime.vocab_size()
    for token_id in token_ids:
        if token_id >= vocab_size:
            raise serializers.ValidationError(
                f"Token id {token_id} is outside the model's vocabulary (size {vocab_size})."
            )


class GenerationOutput(serializers.Serializer):
    def to_representation(self, job):
        trail = trail_for_job(job)
        return {
            "id": str(job.id),
            "request_id": job.request_id,
            "matter": job.matter.name,
            "status": job.status,
            "error": job.error or None,
            "prompt_token_ids": job.prompt_token_ids,
            "params": {
                "max_tokens": job.max_tokens,
                "temperature": job.temperature,
                "top_k": job.top_k,
                "top_p": job.top_p,
                "seed": job.seed,
                "draft_length": job.draft_length,
                "eos_token_id": job.eos_token_id,
            },
            "output_token_ids": job.output_token_ids,
            "stop_reason": job.stop_reason or None,
            "steps": job.steps,
            "drafted": job.drafted,
            "accepted": job.accepted,
            "acceptance_rate": round(job.acceptance_rate, 6),
            "mean_accepted_length": round(job.mean_accepted_length, 6),
            "latency_ms": job.latency_ms,
            "created_at": job.created_at,
            "started_at": job.started_at,
            "finished_at": job.finished_at,
            "attempts": job.attempts,
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
            "prev_hash": record.prev_hash,
            "record_hash": record.record_hash,
            "payload": record.payload,  # the exact text that was hashed
            "decision": json.loads(record.payload),
            "created_at": record.created_at,
        }

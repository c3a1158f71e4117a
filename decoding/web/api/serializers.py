"""The native API's output shapes and query filter (its input shape is decoding.protocol's)."""

import json

from django.urls import reverse
from rest_framework import serializers

from audit.selectors import clear_payload
from decoding.engine import PARAM_NAMES
from decoding.models import GenerationJob
from decoding.protocol.declared import as_declared
from decoding.selectors import job_answer, trail_for_job

from .schema import DecisionRecordOut, GenerationOut


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
        return as_declared(GenerationOut, {
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
            "params": {name: getattr(job, name) for name in (*PARAM_NAMES, "top_logprobs")},
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
        })  # fmt: skip


class DecisionRecordOutput(serializers.Serializer):
    def to_representation(self, record):
        return as_declared(DecisionRecordOut, {
            "seq": record.seq,
            "kind": record.kind,
            "prev_hash": record.prev_hash,
            "record_hash": record.record_hash,
            "payload": record.payload,  # the exact text that was hashed
            # Clear: a format-3 decision's tokens opened for the job's own caller.
            "decision": clear_payload(record.payload, record.openings),
            "created_at": record.created_at,
        })  # fmt: skip

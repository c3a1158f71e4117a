"""The OpenAPI description of the native API: response shapes and the bearer scheme.

The serializers here declare the bodies the native API writes: its writers (GenerationOutput,
DecisionRecordOutput) pass each body through decoding.protocol.declared.as_declared against
them, and schemathesis checks every live response too, so the two cannot drift apart.
"""

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.utils import OpenApiResponse, extend_schema_field
from rest_framework import serializers

from decoding.models import GenerationJob
from decoding.protocol.errors import ErrorOut
from decoding.protocol.fields import param_output_fields
from decoding.protocol.native_input import StopField


class ApiKeyScheme(OpenApiAuthenticationExtension):
    target_class = "decoding.web.api.authentication.ApiKeyAuthentication"
    name = "ApiKey"

    def get_security_definition(self, auto_schema):
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "An API key from `manage.py create_api_key`, scoped to one matter.",
        }


extend_schema_field(
    {
        "oneOf": [
            {"type": "string", "minLength": 1},
            {"type": "array", "items": {"type": "string", "minLength": 1}, "maxItems": 4},
        ]
    }
)(StopField)


def errors(*codes: int) -> dict:
    described = {
        400: "Invalid input; `error.field` names the field",
        401: "Missing, invalid, expired or revoked API key",
        403: "The key lacks the scope this operation needs",
        404: "No such job in the key's matter",
        409: "The job already finished",
        410: "The job's texts were destroyed under an order; `error.message` says when and "
        "under what",
        413: "Request body too large",
        415: "Not JSON",
        429: "Rate limit reached; retry after `Retry-After` seconds",
        503: "Audit store or queue unavailable; nothing was generated",
    }
    return {code: OpenApiResponse(ErrorOut, description=described[code]) for code in codes}


# A job's params: every generation parameter (declared once, decoding.engine.params) and
# top_logprobs. tests/integration/test_response_shapes holds every *Out field here to what the
# API writes (a docstring would show in the schema).
ParamsOut = type(
    "ParamsOut",
    (serializers.Serializer,),
    {**param_output_fields(), "top_logprobs": serializers.IntegerField()},
)


class TimingsOut(serializers.Serializer):
    queue_ms = serializers.FloatField(allow_null=True, help_text="Submitted to started")
    load_ms = serializers.FloatField(allow_null=True, help_text="Model loading; 0 when warm")
    prefill_ms = serializers.FloatField(allow_null=True)
    cached_prompt_tokens = serializers.IntegerField(
        allow_null=True, help_text="Leading prompt tokens found in the worker's prompt cache"
    )
    decode_ms = serializers.FloatField(allow_null=True, help_text="First token to last")
    audit_ms = serializers.FloatField(allow_null=True, help_text="Committing records")


class PositionOut(serializers.Serializer):
    position = serializers.IntegerField(help_text="1 = the first drafted token of a step")
    drafted = serializers.IntegerField()
    accepted = serializers.IntegerField()
    rate = serializers.FloatField()


class MetricsOut(serializers.Serializer):
    drafted_per_step = serializers.ListField(child=serializers.IntegerField())
    accepted_per_step = serializers.ListField(child=serializers.IntegerField())
    acceptance_by_position = PositionOut(many=True)
    accepted_length_histogram = serializers.ListField(
        child=serializers.IntegerField(), help_text="Index n: steps that accepted n drafts"
    )


class TrailRefOut(serializers.Serializer):
    id = serializers.UUIDField()
    status = serializers.CharField()
    records = serializers.IntegerField()
    head_hash = serializers.CharField()
    url = serializers.CharField()


class DestroyedOut(serializers.Serializer):
    at = serializers.DateTimeField()
    order = serializers.CharField(help_text="the order or retention rule it was destroyed under")


class GenerationOut(serializers.Serializer):
    id = serializers.UUIDField()
    request_id = serializers.CharField(allow_null=True)
    directed_by = serializers.CharField(allow_null=True)
    designation = serializers.CharField(allow_null=True)
    matter = serializers.CharField()
    model = serializers.CharField()
    status = serializers.ChoiceField(choices=GenerationJob.Status.choices)
    error = serializers.CharField(allow_null=True, help_text="what failed, for the caller")
    failure = serializers.ChoiceField(
        choices=GenerationJob.Failure.choices,
        allow_null=True,
        help_text="why the job failed (the cause itself is in the operator's log)",
    )
    prompt_token_ids = serializers.ListField(child=serializers.IntegerField())
    stop = serializers.ListField(child=serializers.CharField())
    params = ParamsOut()
    response_format = serializers.JSONField(
        allow_null=True, help_text="the structured-output format the output was decoded under"
    )
    output_text = serializers.CharField(allow_blank=True)
    output_token_ids = serializers.ListField(child=serializers.IntegerField())
    stop_reason = serializers.CharField(allow_null=True)
    steps = serializers.IntegerField()
    drafted = serializers.IntegerField()
    accepted = serializers.IntegerField()
    acceptance_rate = serializers.FloatField()
    mean_accepted_length = serializers.FloatField()
    latency_ms = serializers.IntegerField(allow_null=True)
    timings = TimingsOut()
    created_at = serializers.DateTimeField()
    started_at = serializers.DateTimeField(allow_null=True)
    finished_at = serializers.DateTimeField(allow_null=True)
    attempts = serializers.IntegerField()
    stream = serializers.BooleanField()
    cancel_requested_at = serializers.DateTimeField(allow_null=True)
    metrics = MetricsOut(allow_null=True)
    destroyed = DestroyedOut(
        allow_null=True, help_text="set when the job's texts were destroyed under an order"
    )
    trail = TrailRefOut(allow_null=True)


class GenerationPageOut(serializers.Serializer):
    next = serializers.URLField(allow_null=True)
    previous = serializers.URLField(allow_null=True)
    results = GenerationOut(many=True)


class DecisionRecordOut(serializers.Serializer):
    seq = serializers.IntegerField()
    kind = serializers.ChoiceField(
        choices=["request", "decision", "answer"],
        help_text="audit format 3: the request (seq 0), a decision per step, the answer (last)",
    )
    prev_hash = serializers.CharField()
    record_hash = serializers.CharField()
    payload = serializers.CharField(
        help_text="The exact canonical JSON text that was hashed (a decision's tokens sealed)"
    )
    decision = serializers.JSONField(
        help_text="payload, parsed; a decision's tokens opened for the job's own caller"
    )
    created_at = serializers.DateTimeField()


class TrailPageOut(serializers.Serializer):
    next = serializers.URLField(allow_null=True)
    previous = serializers.URLField(allow_null=True)
    results = DecisionRecordOut(many=True)

"""The OpenAPI description of the OpenAI-compatible endpoints' bodies."""

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse
from rest_framework import serializers

from decoding.job_input import DEFAULTED_PARAMS
from decoding.protocol.fields import param_output_fields


class OpenAIErrorDetail(serializers.Serializer):
    message = serializers.CharField()
    type = serializers.CharField()
    param = serializers.CharField(allow_null=True)
    code = serializers.CharField(allow_null=True)


class OpenAIErrorOut(serializers.Serializer):
    error = OpenAIErrorDetail()


def errors(*codes: int) -> dict:
    described = {
        400: "Invalid or unsupported parameter (named in `error.param`)",
        401: "Missing, invalid, expired or revoked API key",
        403: "The key lacks the scope this operation needs",
        404: "No such file or batch in this key's matter",
        409: "The batch already ended or is being cancelled",
        410: "The file's bytes were destroyed under an order (the message says when and under "
        "what)",
        413: "Request body (or batch input file) too large",
        415: "Not JSON",
        429: "Rate limit reached; retry after `Retry-After` seconds",
        500: "The generation failed (the job and its trail say why)",
        503: "Audit store or queue unavailable; nothing was released",
        504: "The job did not finish in time and was cancelled",
    }
    return {code: OpenApiResponse(OpenAIErrorOut, description=described[code]) for code in codes}


class PathfinderOut(serializers.Serializer):
    job_id = serializers.UUIDField()
    status = serializers.CharField()
    trail_id = serializers.UUIDField(allow_null=True)
    record_count = serializers.IntegerField()
    head_hash = serializers.CharField(allow_null=True)
    drafted = serializers.IntegerField()
    accepted = serializers.IntegerField()
    acceptance_rate = serializers.FloatField()


class PromptTokensDetailsOut(serializers.Serializer):
    cached_tokens = serializers.IntegerField(help_text="Prompt tokens the prompt cache held")


class UsageOut(serializers.Serializer):
    prompt_tokens = serializers.IntegerField()
    completion_tokens = serializers.IntegerField()
    total_tokens = serializers.IntegerField()
    prompt_tokens_details = PromptTokensDetailsOut()


class CompletionChoiceOut(serializers.Serializer):
    index = serializers.IntegerField()
    text = serializers.CharField(allow_blank=True)
    logprobs = serializers.JSONField(allow_null=True)
    finish_reason = serializers.CharField(allow_null=True)


class CompletionOut(serializers.Serializer):
    id = serializers.CharField()
    object = serializers.CharField()
    created = serializers.IntegerField()
    model = serializers.CharField()
    choices = CompletionChoiceOut(many=True)
    usage = UsageOut()
    pathfinder = PathfinderOut()


class ChatMessageOut(serializers.Serializer):
    role = serializers.CharField()
    content = serializers.CharField(allow_blank=True)


class ChatChoiceOut(serializers.Serializer):
    index = serializers.IntegerField()
    message = ChatMessageOut()
    logprobs = serializers.JSONField(allow_null=True)
    finish_reason = serializers.CharField(allow_null=True)


class ChatCompletionOut(CompletionOut):
    choices = ChatChoiceOut(many=True)


# What a request that leaves a parameter out decodes with (decoding.job_input.sampling_defaults).
SamplingDefaultsOut = type(
    "SamplingDefaultsOut", (serializers.Serializer,), param_output_fields(DEFAULTED_PARAMS)
)


class ModelOut(serializers.Serializer):
    id = serializers.CharField()
    object = serializers.CharField()
    created = serializers.IntegerField()
    owned_by = serializers.CharField()
    description = serializers.CharField(allow_blank=True)
    default_params = SamplingDefaultsOut(
        help_text="What a request that leaves a parameter out decodes with"
    )
    default_params_source = serializers.CharField(
        allow_blank=True, help_text="Where the defaults come from (the model's card or config)"
    )
    top_logprobs = serializers.IntegerField(
        help_text="The most top_logprobs (chat) or logprobs (completions) a request may ask for"
    )


class ModelListOut(serializers.Serializer):
    object = serializers.CharField()
    data = ModelOut(many=True)


STREAM = OpenApiResponse(
    OpenApiTypes.STR,
    description="With `stream: true`: server-sent events, `data: <chunk JSON>` per chunk in "
    "OpenAI's format, then `data: [DONE]`. A chunk carries only tokens whose decision records "
    "are committed; the last one holds `finish_reason` and the `pathfinder` object.",
)


class FileOut(serializers.Serializer):
    id = serializers.CharField()
    object = serializers.CharField(help_text='"file"')
    bytes = serializers.IntegerField()
    created_at = serializers.IntegerField()
    filename = serializers.CharField()
    purpose = serializers.CharField(help_text='"batch" (an input) or "batch_output"')
    status = serializers.CharField()
    status_details = serializers.CharField(allow_null=True)
    expires_at = serializers.IntegerField(allow_null=True)


class FileDeletedOut(serializers.Serializer):
    id = serializers.CharField()
    object = serializers.CharField(help_text='"file"')
    deleted = serializers.BooleanField()


class RequestCountsOut(serializers.Serializer):
    total = serializers.IntegerField(help_text="input lines made into requests so far")
    completed = serializers.IntegerField()
    failed = serializers.IntegerField(help_text="refused, failed or cancelled")


class BatchOut(serializers.Serializer):
    id = serializers.CharField()
    object = serializers.CharField(help_text='"batch"')
    endpoint = serializers.CharField()
    errors = serializers.JSONField(allow_null=True)
    input_file_id = serializers.CharField()
    completion_window = serializers.CharField()
    status = serializers.CharField()
    output_file_id = serializers.CharField(allow_null=True)
    error_file_id = serializers.CharField(allow_null=True)
    created_at = serializers.IntegerField()
    in_progress_at = serializers.IntegerField(allow_null=True)
    expires_at = serializers.IntegerField()
    finalizing_at = serializers.IntegerField(allow_null=True)
    completed_at = serializers.IntegerField(allow_null=True)
    failed_at = serializers.IntegerField(allow_null=True)
    expired_at = serializers.IntegerField(allow_null=True)
    cancelling_at = serializers.IntegerField(allow_null=True)
    cancelled_at = serializers.IntegerField(allow_null=True)
    request_counts = RequestCountsOut()
    metadata = serializers.DictField(child=serializers.CharField(), allow_null=True)


class ListOut(serializers.Serializer):
    object = serializers.CharField(help_text='"list"')
    data = serializers.ListField(child=serializers.JSONField())
    first_id = serializers.CharField(allow_null=True)
    last_id = serializers.CharField(allow_null=True)
    has_more = serializers.BooleanField()

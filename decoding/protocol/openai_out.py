"""The OpenAI-compatible endpoints' response bodies, declared once: the OpenAPI schema is made
from these serializers, and every writer (decoding.protocol.openai_shapes and batch_shapes, the
views) passes its body through decoding.protocol.declared.as_declared against them. A docstring
here would show in the schema."""

from rest_framework import serializers

from decoding.engine.params import PARAM_NAMES
from decoding.job_input import DEFAULTED_PARAMS
from decoding.protocol.fields import param_output_fields


class OpenAIErrorDetail(serializers.Serializer):
    message = serializers.CharField()
    type = serializers.CharField()
    param = serializers.CharField(allow_null=True)
    code = serializers.CharField(allow_null=True)


class OpenAIErrorOut(serializers.Serializer):
    error = OpenAIErrorDetail()


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
# A spec may also set a seed or an end token, which no request gets by default.
SamplingDefaultsOut = type(
    "SamplingDefaultsOut",
    (serializers.Serializer,),
    {
        **param_output_fields(DEFAULTED_PARAMS),
        **param_output_fields(
            tuple(name for name in PARAM_NAMES if name not in DEFAULTED_PARAMS), required=False
        ),
    },
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

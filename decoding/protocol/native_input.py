"""The native API's request shape (GenerationInput), which the /v1 endpoints, Batch API lines
and `manage.py generate` check requests with: shape checks only (types and ranges); every rule
that needs the model or a setting is decoding.job_input's."""

from django.conf import settings
from rest_framework import serializers

from decoding.engine.params import MAX_TOP_LOGPROBS
from decoding.protocol.fields import (
    RefusesUnknownFields,
    StrictCharField,
    StrictIntegerField,
    params_input,
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


class GenerationInput(RefusesUnknownFields, params_input()):
    """A generation request: the generation parameters (params_input) and the fields below.
    Its model, prompt and limits are checked when the job is submitted, the same way for every
    client."""

    # Shape checks only (types and ranges); every other rule is the service's
    # (decoding.job_input), so `manage.py generate` refuses what this API refuses.

    model = StrictCharField(max_length=100, required=False)
    prompt = StrictCharField(required=False, allow_blank=False, trim_whitespace=False)
    messages = ChatMessage(many=True, required=False, allow_empty=False)
    prompt_token_ids = TokenIdsField(required=False)
    stop = StopField(required=False)
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

    def validate_response_format(self, value):
        if value is not None and not isinstance(value, dict):
            raise serializers.ValidationError("Must be an object with a 'type'.")
        return value

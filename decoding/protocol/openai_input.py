"""Shape checks for the OpenAI-compatible requests; the native GenerationInput does the rest."""

from django.conf import settings
from rest_framework import serializers

from decoding.engine.params import MAX_TOP_LOGPROBS
from decoding.protocol.fields import (
    MAX_INT32,
    RefusesUnknownFields,
    StrictCharField,
    StrictFloatField,
    StrictIntegerField,
    params_input,
    text_refusal,
)
from decoding.protocol.native_input import GenerationInput, StopField

# The generation parameters OpenAI's requests carry (top_k as vLLM's extension); the others
# are the model's defaults, and ignore_eos stands for eos_token_id null.
OPENAI_PARAMS = ("max_tokens", "temperature", "top_p", "top_k", "seed")


class StreamOptions(serializers.Serializer):
    include_usage = serializers.BooleanField(required=False, default=False)


class _OpenAIInput(RefusesUnknownFields, params_input(OPENAI_PARAMS, null_is_default=True)):
    """The fields both endpoints take. `top_k` and `ignore_eos` are extensions (as vLLM's);
    `n` must be 1."""

    # The native fields this endpoint calls by other names (errors name the endpoint's own).
    OPENAI_NAMES: dict[str, str] = {}

    model = StrictCharField(max_length=100, required=False)
    stop = StopField(required=False, allow_null=True)
    stream = serializers.BooleanField(required=False, default=False)
    stream_options = StreamOptions(required=False, allow_null=True)
    # OpenAI's end-user identifier: here who directed the request, stated in its request record.
    user = StrictCharField(max_length=200, required=False, allow_blank=True)
    # Pathfinder's extension: the request's confidentiality designation ("attorney work product").
    designation = StrictCharField(max_length=200, required=False, allow_blank=False)
    # vLLM's extension: decode max_tokens tokens even past the end-of-sequence token.
    ignore_eos = serializers.BooleanField(required=False, default=False)
    n = StrictIntegerField(required=False, allow_null=True)
    # Structured outputs (json_object, json_schema), checked and compiled as a native job's.
    response_format = serializers.JSONField(required=False, allow_null=True)
    # OpenAI's fields that Pathfinder does not implement, which client wrappers send anyway:
    # their neutral value changes nothing and is accepted; any other would change the output
    # and is refused by name (NEUTRAL_ONLY).
    presence_penalty = StrictFloatField(required=False, allow_null=True)
    frequency_penalty = StrictFloatField(required=False, allow_null=True)
    logit_bias = serializers.JSONField(required=False, allow_null=True)

    unknown_field_message = "Unsupported parameter: Pathfinder does not implement it."
    # field -> (its neutral value, why no other is accepted)
    NEUTRAL_ONLY = {
        "n": (1, "Only n=1 is supported: one choice per request."),
        "presence_penalty": (
            0,
            "Only 0 is supported: a penalty changes the target's distribution, which every "
            "audited decision must reproduce, and Pathfinder does not implement one.",
        ),
        "frequency_penalty": (
            0,
            "Only 0 is supported: a penalty changes the target's distribution, which every "
            "audited decision must reproduce, and Pathfinder does not implement one.",
        ),
        "logit_bias": (
            {},
            "Only an empty map is supported: a bias changes the target's distribution, which "
            "every audited decision must reproduce, and Pathfinder does not implement one.",
        ),
    }

    def validate(self, data):
        data = super().validate(data)
        for field, (neutral, why) in self.NEUTRAL_ONLY.items():
            if data.get(field) not in (None, neutral):
                raise serializers.ValidationError({field: [why]})
        return data

    def wants_logprobs(self) -> bool:
        """Whether the response carries each token's log-probability."""
        raise NotImplementedError

    def native(self) -> dict:
        """The request as native API fields (GenerationInput), without the OpenAI-only ones."""
        data = {k: v for k, v in self.validated_data.items() if v is not None}
        if data.get("user"):
            data["directed_by"] = data["user"]
        for openai_only in ("stream", "stream_options", "user", "logprobs", *self.NEUTRAL_ONLY):
            data.pop(openai_only, None)
        if data.pop("ignore_eos"):
            data["eos_token_id"] = None
        return data


class CompletionInput(_OpenAIInput):
    OPENAI_NAMES = {"prompt_token_ids": "prompt", "top_logprobs": "logprobs"}

    # A string, a list of one string, or a list of token ids.
    prompt = serializers.JSONField()
    # The legacy API's form: an integer asks for each token's log-probability and that many
    # of the most probable alternatives.
    logprobs = StrictIntegerField(
        min_value=0, max_value=MAX_TOP_LOGPROBS, required=False, allow_null=True
    )

    def wants_logprobs(self) -> bool:
        return self.validated_data.get("logprobs") is not None

    def validate_prompt(self, value):
        if isinstance(value, list) and len(value) == 1 and isinstance(value[0], str):
            value = value[0]
        if isinstance(value, str):
            if not value:
                raise serializers.ValidationError("This field may not be blank.")
            refusal = text_refusal(value)
            if refusal:
                raise serializers.ValidationError(refusal)
            return value
        limit = settings.PATHFINDER_MAX_PROMPT_TOKENS
        if isinstance(value, list) and len(value) > limit:  # before looking at each
            raise serializers.ValidationError(f"At most {limit} token ids.")
        if (
            isinstance(value, list)
            and value
            and all(
                isinstance(t, int) and not isinstance(t, bool) and 0 <= t <= MAX_INT32
                for t in value
            )
        ):
            return value
        raise serializers.ValidationError(
            "Must be a string or a list of token ids (one prompt per request)."
        )

    def native(self) -> dict:
        data = super().native()
        if self.wants_logprobs():
            data["top_logprobs"] = self.validated_data["logprobs"]
        prompt = data.pop("prompt")
        data["prompt" if isinstance(prompt, str) else "prompt_token_ids"] = prompt
        return data


class ChatMessageInput(RefusesUnknownFields, serializers.Serializer):
    unknown_field_message = "Unsupported message field: Pathfinder does not implement it."

    role = serializers.ChoiceField(choices=["system", "developer", "user", "assistant"])
    # A string, or OpenAI's list of content parts, of which text parts are supported.
    content = serializers.JSONField()

    def validate_content(self, value):
        if isinstance(value, list) and all(
            isinstance(part, dict)
            and set(part) == {"type", "text"}
            and part["type"] == "text"
            and isinstance(part["text"], str)
            for part in value
        ):
            value = "".join(part["text"] for part in value)
        if not isinstance(value, str):
            raise serializers.ValidationError("Must be a string or a list of text parts.")
        refusal = text_refusal(value)
        if refusal:
            raise serializers.ValidationError(refusal)
        return value


class ChatCompletionInput(_OpenAIInput):
    messages = ChatMessageInput(many=True, allow_empty=False)
    # Without tools (which are refused) there is nothing to call in parallel: any value is neutral.
    parallel_tool_calls = serializers.BooleanField(required=False, allow_null=True)
    max_completion_tokens = StrictIntegerField(min_value=1, required=False, allow_null=True)
    logprobs = serializers.BooleanField(required=False, allow_null=True)
    top_logprobs = StrictIntegerField(
        min_value=0, max_value=MAX_TOP_LOGPROBS, required=False, allow_null=True
    )

    def validate(self, data):
        data = super().validate(data)
        if data.get("top_logprobs") is not None and not data.get("logprobs"):
            raise serializers.ValidationError({"top_logprobs": ["Requires logprobs: true."]})
        return data

    def wants_logprobs(self) -> bool:
        return bool(self.validated_data.get("logprobs"))

    def native(self) -> dict:
        data = super().native()
        data.pop("parallel_tool_calls", None)
        limit = data.pop("max_completion_tokens", None)
        if limit is not None and "max_tokens" not in data:
            data["max_tokens"] = limit
        data["messages"] = [
            # The chat templates know system, user and assistant; developer is OpenAI's system.
            {"role": "system" if m["role"] == "developer" else m["role"], "content": m["content"]}
            for m in data["messages"]
        ]
        return data


def native_input(data: dict, names: dict) -> dict:
    """A request (`native()` of the serializers above) checked as the native API checks its
    shape; errors keep the endpoint's own names (`OPENAI_NAMES`)."""
    native = GenerationInput(data=data)
    if not native.is_valid():
        renamed = {names.get(field, field): errors for field, errors in native.errors.items()}
        raise serializers.ValidationError(renamed)
    return native.validated_data

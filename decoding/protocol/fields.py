"""The request fields both APIs share, strict: a value is taken as JSON wrote it or refused with
a 400 naming its field, before anything is written. No coercion ("5" is not 5, 123 is not
"123"), integers that fit a database integer, text without NUL or lone surrogates (neither can
be stored nor hashed as UTF-8), and no keys the endpoint does not know."""

import math

from rest_framework import serializers

from decoding.engine.params import PARAM_NAMES, bounds_of

MAX_INT32 = 2**31 - 1  # the integer columns' bound


def text_refusal(value: str) -> str | None:
    """Why `value` cannot be stored as text, or None."""
    if "\x00" in value:
        return "Must not contain a NUL character."
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return "Must not contain a lone surrogate (it is not UTF-8)."
    return None


class StrictIntegerField(serializers.IntegerField):
    def __init__(self, **kwargs):
        kwargs.setdefault("max_value", MAX_INT32)
        super().__init__(**kwargs)

    def to_internal_value(self, data):
        if isinstance(data, bool) or not isinstance(data, int):
            raise serializers.ValidationError("Must be an integer.")
        return super().to_internal_value(data)


class StrictFloatField(serializers.FloatField):
    def to_internal_value(self, data):
        if isinstance(data, bool) or not isinstance(data, (int, float)):
            raise serializers.ValidationError("Must be a number.")
        value = super().to_internal_value(data)
        if not math.isfinite(value):
            raise serializers.ValidationError("Must be a finite number.")
        return value


class StrictCharField(serializers.CharField):
    def to_internal_value(self, data):
        if not isinstance(data, str):
            raise serializers.ValidationError("Must be a string.")
        refusal = text_refusal(data)
        if refusal:
            raise serializers.ValidationError(refusal)
        return super().to_internal_value(data)


class RefusesUnknownFields:
    """A serializer mixin: a key it does not declare is a 400 naming that key."""

    unknown_field_message = "Unknown field."

    def to_internal_value(self, data):
        if isinstance(data, dict):
            unknown = sorted(set(data) - set(self.fields))
            if unknown:
                raise serializers.ValidationError({unknown[0]: [self.unknown_field_message]})
        return super().to_internal_value(data)


def _greater_than(least):
    def check(value):
        if value <= least:
            raise serializers.ValidationError(f"Ensure this value is greater than {least:g}.")

    return check


def param_input_fields(names: tuple[str, ...] = PARAM_NAMES, *, null_is_default=False) -> dict:
    """The request fields of the generation parameters `names`, each checked as its Bounds
    declare (decoding.engine.params, the one statement of what a parameter accepts).
    `null_is_default`: null stands for "leave it out" (OpenAI's convention)."""
    made = {}
    for name in names:
        bounds = bounds_of()[name]
        field = StrictIntegerField if bounds.kind is int else StrictFloatField
        options = {"min_value": bounds.least, "required": False, "help_text": bounds.help}
        if bounds.most is not None:
            options["max_value"] = bounds.most
        if bounds.above:
            options["validators"] = [_greater_than(bounds.least)]
        made[name] = field(allow_null=bounds.nullable or null_is_default, **options)
    return made


def param_output_fields(names: tuple[str, ...] = PARAM_NAMES, *, required=True) -> dict:
    """The generation parameters `names` as a response states them (for the schemas);
    `required=False`: present only where set."""
    made = {}
    for name in names:
        bounds = bounds_of()[name]
        field = serializers.IntegerField if bounds.kind is int else serializers.FloatField
        made[name] = field(allow_null=bounds.nullable, help_text=bounds.help, required=required)
    return made


def params_input(names: tuple[str, ...] = PARAM_NAMES, *, null_is_default=False) -> type:
    """A serializer base holding param_input_fields(names): an input serializer derives from it
    (its own fields follow the parameters)."""
    fields = param_input_fields(names, null_is_default=null_is_default)
    return type("GenerationParamsInput", (serializers.Serializer,), fields)

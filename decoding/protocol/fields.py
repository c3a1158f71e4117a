"""The request fields both APIs share, strict: a value is taken as JSON wrote it or refused with
a 400 naming its field, before anything is written. No coercion ("5" is not 5, 123 is not
"123"), integers that fit a database integer, text without NUL or lone surrogates (neither can
be stored nor hashed as UTF-8), and no keys the endpoint does not know."""

import math

from rest_framework import serializers

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

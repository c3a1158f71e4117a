"""A response body held to its one declaration: the output serializer the OpenAPI schema is
made from. Each writer passes its body through `as_declared`, so every answer the service
writes has exactly the declared fields, nested objects and list items included, or the write
fails naming the field, in production and in every test that writes one (not only on the
samples a shape test happens to try)."""

from __future__ import annotations

import functools

from rest_framework import serializers


class UndeclaredShape(AssertionError):
    """A writer's body differs from its declaration: a bug of ours, never the caller's."""


# A declaration's fields: name -> (required, the nested object's fields or None, is a list).
Fields = dict[str, tuple[bool, "Fields | None", bool]]


def as_declared(declaration: type[serializers.Serializer], body: dict) -> dict:
    """`body`, checked to hold exactly the fields `declaration` declares."""
    _check(fields_of(declaration), body, declaration.__name__)
    return body


@functools.cache
def fields_of(declaration: type[serializers.Serializer]) -> Fields:
    return _fields(declaration())


def _fields(serializer: serializers.Serializer) -> Fields:
    fields: Fields = {}
    for name, field in serializer.fields.items():
        many = isinstance(field, serializers.ListSerializer | serializers.ListField)
        inner = field.child if many else field
        nested = _fields(inner) if isinstance(inner, serializers.Serializer) else None
        fields[name] = (field.required, nested, many)
    return fields


def _check(fields: Fields, body: object, where: str) -> None:
    if not isinstance(body, dict):
        raise UndeclaredShape(f"{where} is declared an object, written {type(body).__name__}")
    undeclared = sorted(set(body) - set(fields))
    if undeclared:
        raise UndeclaredShape(f"{where}.{undeclared[0]} is written but not declared")
    for name, (required, nested, many) in fields.items():
        if name not in body:
            if required:
                raise UndeclaredShape(f"{where}.{name} is declared but not written")
            continue
        value = body[name]
        if nested is None or value is None:  # an open object (JSON), or null
            continue
        for index, item in enumerate(value if many else [value]):
            _check(nested, item, f"{where}.{name}[{index}]" if many else f"{where}.{name}")

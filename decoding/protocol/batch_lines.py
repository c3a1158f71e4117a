"""A Batch API input line checked as its endpoint checks a request: the envelope (`custom_id`,
`method`, `url`, `body`) here, the body by the endpoint's own serializers, and a refusal worded
as the endpoint would word it (openai_api.errors), for the batch's error file.

What needs the model (job_input: the prompt's length, the spec's limits) is checked when the
line becomes a job (decoding.batches), with the same words.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from django.conf import settings
from rest_framework import exceptions, serializers

from decoding.job_input import InvalidInput
from decoding.protocol.parsers import MAX_DEPTH, TOO_DEEP, json_depth
from decoding.storable import storable

from . import openai_shapes as shapes
from .openai_errors import exception_handler, openai_error_body
from .openai_input import ChatCompletionInput, CompletionInput, native_input

# The endpoints a batch may run, with the request they take and the response they give.
ENDPOINTS = {
    "/v1/chat/completions": (ChatCompletionInput, shapes.CHAT),
    "/v1/completions": (CompletionInput, shapes.COMPLETION),
}
_ENVELOPE = ("custom_id", "method", "url", "body")
MAX_CUSTOM_ID = 512  # decoding.models.BatchLine.custom_id's length
_BAD_CUSTOM_ID = (
    f"At most {MAX_CUSTOM_ID} characters, with no NUL character (U+0000) or unpaired surrogate "
    "(U+D800 to U+DFFF)."
)
_UNSTORABLE = (
    "Holds a NUL character (U+0000) or an unpaired surrogate (U+D800 to U+DFFF), which no "
    "request may carry."
)


@dataclass(frozen=True)
class LineRequest:
    """A line whose body the endpoint accepts: job_submit's fields, and how its response shows
    log-probabilities (None: not at all)."""

    custom_id: str
    native: dict
    logprobs_top: int | None
    names: dict  # native field -> the endpoint's name, for job_input's refusals


@dataclass(frozen=True)
class LineRefusal:
    custom_id: str | None
    status_code: int
    body: dict  # OpenAI's error object, as the endpoint would have answered


def custom_id_of(text: str) -> str | None:
    """The line's custom_id, when it is a JSON object with a string one (the upload's check
    for repeats; everything else about the line is checked when it runs)."""
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return None
    custom_id = value.get("custom_id") if isinstance(value, dict) else None
    return custom_id if isinstance(custom_id, str) else None


def line_check(endpoint: str, text: str) -> LineRequest | LineRefusal:
    try:
        value = json.loads(text)
    except (ValueError, RecursionError) as exc:
        message = TOO_DEEP if isinstance(exc, RecursionError) else f"JSON parse error - {exc}"
        return _refused(None, exceptions.ParseError(message))
    if not isinstance(value, dict):
        return _refused(None, _invalid("body", "Each line must be a JSON object."))
    custom_id = value.get("custom_id")
    if not isinstance(custom_id, str) or not custom_id:
        return _refused(None, _invalid("custom_id", "Required: a non-empty string."))
    if not storable(custom_id) or len(custom_id) > MAX_CUSTOM_ID:
        return _refused(None, _invalid("custom_id", _BAD_CUSTOM_ID))
    where = unstorable_at(value)
    if where is not None:  # named by its place, never echoed: the store cannot hold it
        return _refused(custom_id, _invalid(where, _UNSTORABLE))
    try:
        return _request(endpoint, custom_id, value)
    except exceptions.APIException as exc:
        return _refused(custom_id, exc)


def unstorable_at(value: object) -> str | None:
    """Where in a parsed line the first string (a key or a value) is one the store cannot hold:
    its dotted path (`body.messages.0.content`), with `(a field name)` for a key, or None."""
    stack = [("", value)]
    while stack:
        path, item = stack.pop()
        if isinstance(item, str):
            if not storable(item):
                return path or "body"
        elif isinstance(item, dict):
            for key, child in item.items():
                if not storable(key):
                    return f"{path}.(a field name)" if path else "(a field name)"
                stack.append((f"{path}.{key}" if path else key, child))
        elif isinstance(item, list):
            stack += [(f"{path}.{i}", child) for i, child in enumerate(item)]
    return None


def refusal_for(line: LineRequest, exc: InvalidInput) -> LineRefusal:
    """job_input's refusal of a line, under the endpoint's name for the field."""
    return _refused(line.custom_id, InvalidInput(line.names.get(exc.field, exc.field), str(exc)))


def _request(endpoint: str, custom_id: str, value: dict) -> LineRequest:
    unknown = sorted(set(value) - set(_ENVELOPE))
    if unknown:
        raise _invalid(unknown[0], "Unknown field of a batch line.")
    if value.get("method") != "POST":
        raise _invalid("method", 'Must be "POST".')
    if value.get("url") != endpoint:
        raise _invalid("url", f"Must be this batch's endpoint, {endpoint!r}.")
    body = value.get("body")
    if not isinstance(body, dict):
        raise _invalid("body", "Required: the request body, a JSON object.")
    size = len(json.dumps(body, ensure_ascii=False).encode("utf-8"))
    limit = settings.PATHFINDER_MAX_BODY_BYTES
    if size > limit:
        raise _TooLarge(f"body: request body is {size} bytes; the limit is {limit}.")
    if json_depth(body) > MAX_DEPTH:
        raise exceptions.ParseError(TOO_DEEP)
    input_class, _ = ENDPOINTS[endpoint]
    data = input_class(data=body)
    data.is_valid(raise_exception=True)
    if data.validated_data["stream"]:
        raise _invalid("stream", "A batch line cannot stream: its answer goes to the output file.")
    native = native_input(data.native(), data.OPENAI_NAMES)
    top = native.get("top_logprobs", 0) if data.wants_logprobs() else None
    return LineRequest(custom_id, native, top, data.OPENAI_NAMES)


class _TooLarge(exceptions.APIException):
    status_code = 413
    default_code = "payload_too_large"


def _invalid(field: str, message: str) -> serializers.ValidationError:
    return serializers.ValidationError({field: [message]})


def _refused(custom_id: str | None, exc: Exception) -> LineRefusal:
    if isinstance(exc, _TooLarge):  # as the body-size middleware words it
        body = openai_error_body(413, str(exc.detail), "body", "payload_too_large")
        return LineRefusal(custom_id, 413, body)
    response = exception_handler(exc, {})
    return LineRefusal(custom_id, response.status_code, dict(response.data))

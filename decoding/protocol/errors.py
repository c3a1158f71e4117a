"""One error shape for /api/v1/*: {"error": {"status", "code", "field", "message", "fields"}}.

`field` names the first offending field ("body" for the request as a whole), so a client always
knows what to fix.
"""

import logging

from django.core.exceptions import PermissionDenied, RequestDataTooBig
from django.db import DatabaseError
from django.http import Http404
from rest_framework import exceptions, serializers, status
from rest_framework.response import Response

from decoding.fair_share import OverCapacity
from decoding.job_input import InvalidInput
from decoding.protocol.declared import as_declared
from decoding.services import QueueUnavailable

log = logging.getLogger(__name__)

_FIELD_FOR = {
    exceptions.ParseError: "body",
    exceptions.AuthenticationFailed: "authorization",
    exceptions.NotAuthenticated: "authorization",
    exceptions.UnsupportedMediaType: "content-type",
}


# The error body, declared once (the OpenAPI schema's ErrorOut); error_response is held to it.
class ErrorDetail(serializers.Serializer):
    status = serializers.IntegerField()
    code = serializers.CharField()
    field = serializers.CharField(allow_null=True, help_text="The offending field, or body")
    message = serializers.CharField()
    fields = serializers.DictField(
        child=serializers.ListField(child=serializers.CharField()), required=False
    )


class ErrorOut(serializers.Serializer):
    error = ErrorDetail()


def error_response(status_code: int, code: str, field: str | None, message: str, fields=None):
    body = {"status": status_code, "code": code, "field": field, "message": message}
    if fields:
        body["fields"] = fields
    return Response(as_declared(ErrorOut, {"error": body}), status=status_code)


def destroyed_response(job) -> Response:
    """410 for a job whose texts were destroyed under an order: what is gone, when, under
    what, and that its trail's proofs are kept."""
    return error_response(
        410,
        "destroyed",
        "id",
        f"id: the texts of job {job.id} were destroyed on {job.destroyed_at:%Y-%m-%d} under "
        f"{job.destroyed_under!r}; its trail's records and proofs are kept "
        f"(/api/v1/generations/{job.id}/trail).",
    )


def exception_handler(exc, context):
    if isinstance(exc, exceptions.ValidationError):
        return _validation_error(exc)
    if isinstance(exc, InvalidInput):
        message = str(exc)
        return error_response(
            400, "invalid", exc.field, f"{exc.field}: {message}", {exc.field: [message]}
        )
    if isinstance(exc, OverCapacity):
        response = error_response(429, "over_capacity", None, str(exc))
        response["Retry-After"] = str(exc.retry_after_s)
        return response
    if isinstance(exc, RequestDataTooBig):
        return error_response(413, "payload_too_large", "body", f"body: {exc}")
    if isinstance(exc, (DatabaseError, QueueUnavailable)):
        log.error("refused a request: %s: %s", type(exc).__name__, exc, exc_info=exc)
        return error_response(
            status.HTTP_503_SERVICE_UNAVAILABLE,
            "service_unavailable",
            None,
            "The audit store or job queue is unavailable; nothing was generated. Retry later.",
        )
    # What DRF's own handler does (rest_framework.views, which this shelf does not import: its
    # views load the web side's authentication classes), in this API's shape.
    if isinstance(exc, Http404):
        exc = exceptions.NotFound()
    elif isinstance(exc, PermissionDenied):
        exc = exceptions.PermissionDenied(*exc.args)
    if not isinstance(exc, exceptions.APIException):
        return None
    field = getattr(exc, "field", None)  # an exception of ours may name its own
    field = field or next((f for cls, f in _FIELD_FOR.items() if isinstance(exc, cls)), None)
    message = str(exc.detail)
    if field and not message.startswith(f"{field}:"):
        message = f"{field}: {message}"
    result = error_response(exc.status_code, str(exc.get_codes()), field, message)
    if getattr(exc, "auth_header", None):  # set by the view that caught it
        result["WWW-Authenticate"] = exc.auth_header
    if getattr(exc, "wait", None):  # a throttle's
        result["Retry-After"] = str(int(exc.wait))  # as DRF writes it
    return result


def _validation_error(exc: exceptions.ValidationError):
    detail = exc.detail if isinstance(exc.detail, dict) else {"body": exc.detail}
    fields = {("body" if k == "non_field_errors" else k): _flatten(v) for k, v in detail.items()}
    field, messages = next(iter(fields.items()))
    return error_response(400, "invalid", field, f"{field}: {messages[0]}", fields)


def _flatten(value) -> list[str]:
    if isinstance(value, dict):  # a nested object's errors; DRF's name for its own is dropped
        return [
            msg if key == "non_field_errors" else f"{key}: {msg}"
            for key, item in value.items()
            for msg in _flatten(item)
        ]
    if isinstance(value, list):
        return [msg for item in value for msg in _flatten(item)]
    return [str(value)]

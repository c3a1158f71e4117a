"""Errors on /v1/* in OpenAI's error object: {"error": {"message", "type", "param", "code"}}.

The native handler decides status, field and message; this only reshapes its body, so both APIs
refuse the same requests for the same reasons.
"""

from rest_framework.response import Response

from decoding.api.errors import exception_handler as native_exception_handler

_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    409: "conflict_error",
    413: "invalid_request_error",
    415: "invalid_request_error",
    429: "rate_limit_error",
}


def openai_error(status: int, message: str, param: str | None = None, code: str | None = None):
    body = {
        "message": message,
        "type": _TYPES.get(status, "server_error"),
        "param": param,
        "code": code,
    }
    return Response({"error": body}, status=status)


def exception_handler(exc, context):
    response = native_exception_handler(exc, context)
    if response is None:
        return None
    error = response.data["error"]
    result = openai_error(response.status_code, error["message"], error["field"], error["code"])
    for header in ("WWW-Authenticate", "Retry-After", "Allow"):
        if header in response:
            result[header] = response[header]
    return result

"""Errors on /v1/* in OpenAI's error object: {"error": {"message", "type", "param", "code"}}.

The native handler decides status, field and message; this only reshapes its body, so both APIs
refuse the same requests for the same reasons. The errors of a job's outcome (failed, the store
lost, the service stopping) are here too, for the waiting response and the stream alike.
"""

from rest_framework.response import Response

from decoding.models import GenerationJob
from decoding.protocol.declared import as_declared
from decoding.protocol.errors import exception_handler as native_exception_handler
from decoding.protocol.openai_out import OpenAIErrorOut

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


def openai_error_body(status: int, message: str, param: str | None, code: str | None) -> dict:
    return as_declared(OpenAIErrorOut, {
        "error": {
            "message": message,
            "type": _TYPES.get(status, "server_error"),
            "param": param,
            "code": code,
        }
    })  # fmt: skip


def openai_error(status: int, message: str, param: str | None = None, code: str | None = None):
    return Response(openai_error_body(status, message, param, code), status=status)


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


def job_failure(job: GenerationJob) -> Response:
    unavailable = job.failure == GenerationJob.Failure.AUDIT_UNAVAILABLE
    return openai_error(
        503 if unavailable else 500, f"{job.error} (job {job.id})", code=job.failure or "failed"
    )


def audit_unavailable(job: GenerationJob) -> Response:
    message = (
        f"the audit store became unavailable; the stream of job {job.id} ends here. Its answer, "
        f"once recorded, can be fetched from /api/v1/generations/{job.id}."
    )
    response = openai_error(503, message, code="service_unavailable")
    response["Retry-After"] = "5"
    return response


def service_stopping(job: GenerationJob) -> Response:
    message = f"the service is stopping; job {job.id} was cancelled. Retry shortly."
    response = openai_error(503, message, code="service_stopping")
    response["Retry-After"] = "5"
    return response

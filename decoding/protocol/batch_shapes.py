"""The Batch API's objects in OpenAI's shapes: a file, a batch, and a batch's output and error
lines, `{"id", "custom_id", "response": {"status_code", "request_id", "body"}, "error"}`, each
body what the endpoint itself answers (a completed line's with its `pathfinder` object)."""

from __future__ import annotations

from decoding.models import Batch, BatchFile, BatchLine, GenerationJob

from . import openai_shapes as shapes
from .batch_lines import ENDPOINTS
from .declared import as_declared
from .openai_errors import job_failure
from .openai_out import BatchOut, FileOut

# Why a line's job never finished, by how its batch ended (OpenAI's codes).
_UNFINISHED = {
    Batch.Status.EXPIRED: (
        "batch_expired",
        "This request could not be run before the batch expired.",
    ),
    Batch.Status.CANCELLED: (
        "batch_cancelled",
        "The batch was cancelled before this request finished.",
    ),
    Batch.Status.FAILED: (
        "batch_failed",
        "The batch failed before this request finished.",
    ),
}


def _epoch(moment) -> int | None:
    return int(moment.timestamp()) if moment else None


def file_object(batch_file: BatchFile) -> dict:
    return as_declared(FileOut, {
        "id": batch_file.id,
        "object": "file",
        "bytes": batch_file.bytes,
        "created_at": _epoch(batch_file.created_at),
        "filename": batch_file.filename,
        "purpose": batch_file.purpose,
        "status": "processed",
        "status_details": None,
        "expires_at": None,
    })  # fmt: skip


def batch_object(batch: Batch, request_counts: dict) -> dict:
    stamps = ("created_at", "in_progress_at", "expires_at", "finalizing_at", "completed_at",
              "failed_at", "expired_at", "cancelling_at", "cancelled_at")  # fmt: skip
    return as_declared(BatchOut, {
        "id": batch.id,
        "object": "batch",
        "endpoint": batch.endpoint,
        "errors": batch.errors,
        "input_file_id": batch.input_file_id,
        "completion_window": batch.completion_window,
        "status": batch.status,
        "output_file_id": batch.output_file_id,
        "error_file_id": batch.error_file_id,
        **{stamp: _epoch(getattr(batch, stamp)) for stamp in stamps},
        "request_counts": request_counts,
        "metadata": batch.metadata,
    })  # fmt: skip


def line_errors(errors: dict | None, refused: list[BatchLine]) -> dict:
    """The batch's `errors` with each refused line added as OpenAI numbers a line's error
    (`code`, `message`, `param`, `line`); the lines themselves go on to the error file."""
    data = list((errors or {}).get("data", []))
    for line in refused:
        error = line.refusal["body"].get("error", {})
        data.append({"code": error.get("code"), "message": error.get("message"),
                     "param": error.get("param"), "line": line.line})  # fmt: skip
    return {"object": "list", "data": data}


def batch_failure(errors: dict | None, message: str) -> dict:
    """The batch's `errors` with the reason it failed as a whole (no line: the batch's own)."""
    data = list((errors or {}).get("data", []))
    data.append({"code": "batch_failed", "message": message, "param": None, "line": None})
    return {"object": "list", "data": data}


def succeeded(line: BatchLine) -> bool:
    return line.job is not None and line.job.status == GenerationJob.Status.SUCCEEDED


def output_line(line: BatchLine) -> dict:
    """A completed line: status 200 and the endpoint's response body."""
    _, kind = ENDPOINTS[line.batch.endpoint]
    body = shapes.answered(line.job, kind, line.logprobs_top)
    return _line(line, {"status_code": 200, "request_id": str(line.job.id), "body": body})


def error_line(line: BatchLine, ending: str) -> dict:
    """A line refused as its endpoint would refuse it, or whose job failed or was cancelled;
    `ending` is the status the batch ends in (an unfinished job's line says why)."""
    if line.job is None:
        return _line(line, {"status_code": line.refusal["status_code"], "request_id": None,
                            "body": line.refusal["body"]})  # fmt: skip
    job = line.job
    if job.status == GenerationJob.Status.FAILED:
        failure = job_failure(job)
        body = {"status_code": failure.status_code, "request_id": str(job.id), "body": failure.data}
        return _line(line, body)
    code, message = _UNFINISHED.get(ending, ("cancelled", "This request's job was cancelled."))
    return _line(line, None, {"code": code, "message": f"{message} (job {job.id})"})


def never_made_line(batch: Batch, number: int, custom_id: str | None, ending: str) -> dict:
    """A line of the input its batch ended before reading (cancelled, expired or failed while
    validating): it never became a request, and the error file says so, so every line is in
    one of the two files."""
    code, message = _UNFINISHED.get(ending, _UNFINISHED[Batch.Status.CANCELLED])
    return _line(BatchLine(batch=batch, line=number, custom_id=custom_id), None,
                 {"code": code, "message": f"{message} (line {number}, never read)"})  # fmt: skip


def _line(line: BatchLine, response: dict | None, error: dict | None = None) -> dict:
    return {
        "id": f"batch_req_{line.batch_id.removeprefix('batch_')}_{line.line}",
        "custom_id": line.custom_id,
        "response": response,
        "error": error,
    }

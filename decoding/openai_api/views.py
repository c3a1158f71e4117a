"""POST /v1/completions, POST /v1/chat/completions, GET /v1/models.

Each request becomes an ordinary job on a Celery worker. The web process then waits for it
(bounded by PATHFINDER_SYNC_TIMEOUT_S) or relays its committed tokens as server-sent events.
"""

from __future__ import annotations

import json
import logging
import time

from django.conf import settings
from django.db import DatabaseError
from django.http import StreamingHttpResponse
from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from decoding import relay, runtime, services, waiting
from decoding.api.serializers import GenerationInput
from decoding.job_input import InvalidInput, sampling_defaults
from decoding.logprobs import token_logprobs
from decoding.models import GenerationJob, ModelSpec
from decoding.selectors import AnswerNotRecorded, job_answer, job_decisions
from decoding.text import TextStream

from . import shapes
from .errors import exception_handler, openai_error
from .schema import STREAM, ChatCompletionOut, CompletionOut, ModelListOut, errors
from .serializers import ChatCompletionInput, CompletionInput

logger = logging.getLogger(__name__)

# A stream with nothing new says so with an SSE comment this often, so a client that left is
# noticed (the write fails) and its job cancelled, even while the job waits in the queue.
HEARTBEAT_S = 2.0


class OpenAIView(APIView):
    def get_exception_handler(self):
        return exception_handler


class ModelList(OpenAIView):
    @extend_schema(
        operation_id="models_list",
        summary="The model specs requests may name",
        responses={200: ModelListOut, **errors(401, 403, 429)},
    )
    def get(self, request):
        specs = ModelSpec.objects.order_by("name")
        return Response(
            {
                "object": "list",
                "data": [
                    {
                        "id": spec.name,
                        "object": "model",
                        "created": int(spec.updated_at.timestamp()),
                        "owned_by": "pathfinder",
                        "description": spec.description,
                        "default_params": sampling_defaults(spec),
                        "default_params_source": spec.default_params_source,
                        "top_logprobs": spec.top_logprobs,
                    }
                    for spec in specs
                ],
            }
        )


class _Generate(OpenAIView):
    input_class: type[CompletionInput] | type[ChatCompletionInput]
    kind: str

    def post(self, request):
        data = self.input_class(data=request.data)
        data.is_valid(raise_exception=True)
        names = data.OPENAI_NAMES
        native = _native_input(data.native(), names)
        stream = data.validated_data["stream"]
        # None: no logprobs in the response; else how many alternatives each token shows.
        top = native.get("top_logprobs", 0) if data.wants_logprobs() else None
        slot = waiting.WaitSlot()  # before the job exists: a refusal leaves nothing behind
        try:
            job, _ = services.job_submit(
                matter=request.auth.matter,
                api_key=request.auth,
                stream=stream,
                caller_waits=True,
                **native,
            )
        except InvalidInput as exc:
            slot.release()
            raise InvalidInput(names.get(exc.field, exc.field), str(exc)) from exc
        except BaseException:
            slot.release()
            raise
        headers = {"X-Pathfinder-Job": str(job.id)}
        check = waiting.watch(request)
        if stream:
            options = data.validated_data.get("stream_options") or {}
            chunks = _sse(
                job, self.kind, check, include_usage=options.get("include_usage", False), top=top
            )
            body = waiting.HeldWhileStreaming(chunks, slot)
            response = StreamingHttpResponse(body, content_type="text/event-stream")
            response["Cache-Control"] = "no-cache"
            response["X-Accel-Buffering"] = "no"  # proxies must pass chunks on at once
            for name, value in headers.items():
                response[name] = value
            return response
        with slot:
            try:
                job = relay.wait(job.id, timeout=settings.PATHFINDER_SYNC_TIMEOUT_S, check=check)
            except relay.JobTimeout as exc:
                _cancel_quietly(job)
                message = f"{exc}; it was cancelled."
                return _with(openai_error(504, message, code="timeout"), headers)
            except waiting.CallerGone:
                _cancel_quietly(job)  # nobody is left to read its answer
                logger.info("caller left; job cancelled", extra={"job_id": str(job.id)})
                return _with(openai_error(499, "client closed the request", code="gone"), headers)
            except waiting.ServiceStopping:
                _cancel_quietly(job)
                return _with(_stopping(job), headers)
        if job.status == GenerationJob.Status.FAILED:
            return _with(_failure(job), headers)
        entries = None
        if top is not None:
            tokenizer = runtime.tokenizer_for(job.model_spec)
            entries = token_logprobs(job_decisions(job), tokenizer, top)
        return Response(shapes.response(job, self.kind, entries), headers=headers)


def _generate_schema(operation_id: str, summary: str, request, response):
    """Both endpoints answer JSON, or a stream of server-sent events with `stream: true`."""
    return extend_schema_view(
        post=extend_schema(
            operation_id=operation_id,
            summary=summary,
            request=request,
            responses={
                (200, "application/json"): response,
                (200, "text/event-stream"): STREAM,
                **errors(400, 401, 403, 413, 415, 429, 500, 503, 504),
            },
        )
    )


@_generate_schema(
    "completions_create", "Complete a prompt (OpenAI-compatible)", CompletionInput, CompletionOut
)
class Completions(_Generate):
    input_class = CompletionInput
    kind = shapes.COMPLETION


@_generate_schema(
    "chat_completions_create",
    "Answer a chat (OpenAI-compatible), through the model's chat template",
    ChatCompletionInput,
    ChatCompletionOut,
)
class ChatCompletions(_Generate):
    input_class = ChatCompletionInput
    kind = shapes.CHAT


def _native_input(data: dict, names: dict) -> dict:
    """The request checked as the native API checks its shape; errors keep OpenAI's names."""
    native = GenerationInput(data=data)
    if not native.is_valid():
        renamed = {names.get(field, field): errors for field, errors in native.errors.items()}
        raise serializers.ValidationError(renamed)
    return native.validated_data


def _failure(job: GenerationJob) -> Response:
    unavailable = job.failure == GenerationJob.Failure.AUDIT_UNAVAILABLE
    return openai_error(
        503 if unavailable else 500, f"{job.error} (job {job.id})", code=job.failure or "failed"
    )


def _with(response: Response, headers: dict) -> Response:
    for name, value in headers.items():
        response[name] = value
    return response


def _unavailable(job: GenerationJob) -> Response:
    message = (
        f"the audit store became unavailable; the stream of job {job.id} ends here. Its answer, "
        f"once recorded, can be fetched from /api/v1/generations/{job.id}."
    )
    response = openai_error(503, message, code="service_unavailable")
    response["Retry-After"] = "5"
    return response


def _stopping(job: GenerationJob) -> Response:
    message = f"the service is stopping; job {job.id} was cancelled. Retry shortly."
    response = openai_error(503, message, code="service_stopping")
    response["Retry-After"] = "5"
    return response


def _cancel_quietly(job: GenerationJob) -> None:
    try:
        services.job_cancel(job=job)
    except services.JobFinished:
        pass
    except DatabaseError:
        # Nothing can be cancelled while the store is down; the job runs on to its end.
        logger.warning(
            "could not cancel the job: audit store unavailable", extra={"job_id": str(job.id)}
        )


def _event(body: dict) -> bytes:
    return f"data: {json.dumps(body, default=str)}\n\n".encode()


class _Logprobs:
    """The log-probabilities of relayed tokens not yet sent, for the next chunk (a chunk
    whose text is held back, a partial character or a possible stop string, sends none)."""

    def __init__(self, kind: str, tokenizer, top: int | None):
        self._kind, self._tokenizer, self._top = kind, tokenizer, top
        self._pending: list = []
        self._offset = 0

    def add(self, decisions: list[dict]) -> None:
        if self._top is not None:
            self._pending.extend(token_logprobs(decisions, self._tokenizer, self._top))

    def take(self):
        if self._top is None:
            return None
        body = shapes.logprobs(self._kind, self._pending, text_offset=self._offset)
        self._offset += sum(len(entry.chosen.text) for entry in self._pending)
        self._pending = []
        return body


def _closing(job: GenerationJob, kind: str, text: TextStream, rest: str, *, first, usage, logprobs):
    """The last chunk (and usage) of a finished job, its final text read from the recorded
    answer; an error event instead when the row's text is not what was recorded."""
    try:
        answer = job_answer(job)
    except AnswerNotRecorded as exc:
        yield _event(openai_error(500, str(exc.detail), code="server_error").data)
        return
    rest += text.finish(answer.text if answer else "")
    last = shapes.last_chunk(job, answer, kind, rest, first=first, logprobs=logprobs.take())
    yield _event(last)
    if usage:
        yield _event(shapes.usage_chunk(job, answer, kind))


def _sse(job: GenerationJob, kind: str, check, *, include_usage: bool, top: int | None):
    """The stream: a chunk per batch of committed tokens, the last chunk, then [DONE]. A client
    that leaves (or a timeout, or the service stopping) cancels the job at its next step
    boundary; a job that moved to a new attempt after tokens were sent ends with an error."""
    tokenizer = runtime.tokenizer_for(job.model_spec)
    text = TextStream(tokenizer, job.stop)
    logprobs = _Logprobs(kind, tokenizer, top)
    first, done = True, False
    last_write = time.monotonic()
    try:
        timeout = settings.PATHFINDER_SYNC_TIMEOUT_S
        for progress in relay.follow(job.id, timeout=timeout, check=check):
            logprobs.add(progress.decisions)
            if progress.finished:
                ended = progress.job
                if ended.status == GenerationJob.Status.FAILED:
                    error = _failure(ended).data
                    yield _event(error)
                else:
                    rest = text.push(progress.token_ids)
                    yield from _closing(
                        ended, kind, text, rest, first=first, usage=include_usage, logprobs=logprobs
                    )
                yield b"data: [DONE]\n\n"
                done = True
                return
            delta = text.push(progress.token_ids)
            if delta:
                body = shapes.chunk(
                    progress.job, kind, delta, first=first, logprobs=logprobs.take()
                )
                yield _event(body)
                first, last_write = False, time.monotonic()
            elif time.monotonic() - last_write > HEARTBEAT_S:
                yield b": waiting\n\n"
                last_write = time.monotonic()
    except relay.JobTimeout as exc:
        yield _event(openai_error(504, f"{exc}; it was cancelled.", code="timeout").data)
        yield b"data: [DONE]\n\n"
    except relay.AttemptChanged as exc:
        yield _event(openai_error(500, str(exc), code="attempt_changed").data)
        yield b"data: [DONE]\n\n"
        done = True  # the new attempt decodes on: its answer can be fetched
    except waiting.ServiceStopping:
        yield _event(_stopping(job).data)
        yield b"data: [DONE]\n\n"
    except DatabaseError:
        # The store went away mid-stream: say so in the stream (its status line is long sent),
        # never end it as if the answer were whole.
        logger.warning("audit store lost mid-stream", extra={"job_id": str(job.id)}, exc_info=True)
        yield _event(_unavailable(job).data)
        yield b"data: [DONE]\n\n"
    except waiting.CallerGone:
        pass  # nobody to write to; the job is cancelled below
    finally:
        if not done:
            _cancel_quietly(job)
            logger.info("stream ended early; job cancelled", extra={"job_id": str(job.id)})

"""POST /v1/completions, POST /v1/chat/completions, GET /v1/models.

Each request becomes an ordinary job on a Celery worker. The web process then waits for it
(bounded by PATHFINDER_SYNC_TIMEOUT_S) or relays its committed tokens as server-sent events
(openai_api.sse).
"""

from __future__ import annotations

import logging

from django.conf import settings
from django.http import StreamingHttpResponse
from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework.response import Response
from rest_framework.views import APIView

from decoding import services
from decoding.job_input import InvalidInput, sampling_defaults, servable_specs
from decoding.models import GenerationJob
from decoding.protocol import openai_shapes as shapes
from decoding.protocol.declared import as_declared
from decoding.protocol.openai_errors import (
    exception_handler,
    job_failure,
    openai_error,
    service_stopping,
)
from decoding.protocol.openai_input import ChatCompletionInput, CompletionInput, native_input
from decoding.protocol.openai_out import ChatCompletionOut, CompletionOut, ModelListOut
from decoding.web import relay, waiting

from . import sse
from .schema import STREAM, errors

logger = logging.getLogger(__name__)


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
        # A spec whose model needs a package this installation lacks is not listed, and a
        # request naming it is refused with what to install (decoding.job_input).
        specs = servable_specs()
        return Response(
            as_declared(
                ModelListOut,
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
                },
            )  # fmt: skip
        )


class _Generate(OpenAIView):
    input_class: type[CompletionInput] | type[ChatCompletionInput]
    kind: str

    def post(self, request):
        data = self.input_class(data=request.data)
        data.is_valid(raise_exception=True)
        names = data.OPENAI_NAMES
        native = native_input(data.native(), names)
        stream = data.validated_data["stream"]
        # None: no logprobs in the response; else how many alternatives each token shows.
        top = native.get("top_logprobs", 0) if data.wants_logprobs() else None
        # Before the job exists: a refusal leaves nothing behind.
        slot = waiting.WaitSlot(request.auth.matter_id)
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
            chunks = sse.stream(
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
                services.job_cancel_quietly(job=job)
                message = f"{exc}; it was cancelled."
                return _with(openai_error(504, message, code="timeout"), headers)
            except waiting.CallerGone:
                services.job_cancel_quietly(job=job)  # nobody is left to read its answer
                logger.info("caller left; job cancelled", extra={"job_id": str(job.id)})
                return _with(openai_error(499, "client closed the request", code="gone"), headers)
            except waiting.ServiceStopping:
                services.job_cancel_quietly(job=job)
                return _with(service_stopping(job), headers)
        if job.status == GenerationJob.Status.FAILED:
            return _with(job_failure(job), headers)
        return Response(shapes.answered(job, self.kind, top), headers=headers)


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


def _with(response: Response, headers: dict) -> Response:
    for name, value in headers.items():
        response[name] = value
    return response

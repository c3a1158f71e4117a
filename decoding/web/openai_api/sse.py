"""The /v1 stream: server-sent events of a job's committed tokens, in OpenAI's chunk shapes.

A chunk per batch of committed tokens (read through decoding.web.relay, so none before its record),
the last chunk with the recorded answer's final text, usage when asked, then [DONE]; an error
event instead where the job fails, times out, moves attempts or the store goes away.
"""

from __future__ import annotations

import json
import logging
import time

from django.conf import settings
from django.db import DatabaseError

from decoding import services, tokenizers
from decoding.models import GenerationJob
from decoding.protocol import openai_shapes as shapes
from decoding.protocol.logprobs import token_logprobs
from decoding.protocol.openai_errors import (
    audit_unavailable,
    job_failure,
    openai_error,
    service_stopping,
)
from decoding.selectors import AnswerNotRecorded, job_answer
from decoding.text import TextStream
from decoding.web import relay, waiting

logger = logging.getLogger(__name__)

# A stream with nothing new says so with an SSE comment this often, so a client that left is
# noticed (the write fails) and its job cancelled, even while the job waits in the queue.
HEARTBEAT_S = 2.0


def event(body: dict) -> bytes:
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
        yield event(openai_error(500, str(exc.detail), code="server_error").data)
        return
    rest += text.finish(answer.text if answer else "")
    last = shapes.last_chunk(job, answer, kind, rest, first=first, logprobs=logprobs.take())
    yield event(last)
    if usage:
        yield event(shapes.usage_chunk(job, answer, kind))


def stream(job: GenerationJob, kind: str, check, *, include_usage: bool, top: int | None):
    """The stream: a chunk per batch of committed tokens, the last chunk, then [DONE]. A client
    that leaves (or a timeout, or the service stopping) cancels the job at its next step
    boundary; a job that moved to a new attempt after tokens were sent ends with an error."""
    tokenizer = tokenizers.tokenizer_for(job.model_spec)
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
                    error = job_failure(ended).data
                    yield event(error)
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
                yield event(body)
                first, last_write = False, time.monotonic()
            elif time.monotonic() - last_write > HEARTBEAT_S:
                yield b": waiting\n\n"
                last_write = time.monotonic()
    except relay.JobTimeout as exc:
        yield event(openai_error(504, f"{exc}; it was cancelled.", code="timeout").data)
        yield b"data: [DONE]\n\n"
    except relay.AttemptChanged as exc:
        yield event(openai_error(500, str(exc), code="attempt_changed").data)
        yield b"data: [DONE]\n\n"
        done = True  # the new attempt decodes on: its answer can be fetched
    except waiting.ServiceStopping:
        yield event(service_stopping(job).data)
        yield b"data: [DONE]\n\n"
    except DatabaseError:
        # The store went away mid-stream: say so in the stream (its status line is long sent),
        # never end it as if the answer were whole.
        logger.warning("audit store lost mid-stream", extra={"job_id": str(job.id)}, exc_info=True)
        yield event(audit_unavailable(job).data)
        yield b"data: [DONE]\n\n"
    except waiting.CallerGone:
        pass  # nobody to write to; the job is cancelled below
    finally:
        if not done:
            services.job_cancel_quietly(job=job)
            logger.info("stream ended early; job cancelled", extra={"job_id": str(job.id)})

"""OpenAI response and stream-chunk bodies for a job, plus the `pathfinder` audit object."""

from __future__ import annotations

from audit.evidence.binding import Answer
from decoding import tokenizers
from decoding.models import GenerationJob
from decoding.protocol.declared import as_declared
from decoding.protocol.logprobs import (
    TokenLogprob,
    chat_logprobs,
    completion_logprobs,
    token_logprobs,
)
from decoding.protocol.openai_out import ChatCompletionOut, CompletionOut
from decoding.selectors import job_answer, job_decisions, trail_for_job

# OpenAI has "stop" (a natural end or a stop string) and "length"; a cancelled job ended early
# on request, which the pathfinder object's status tells apart.
_FINISH_REASON = {"eos": "stop", "stop": "stop", "max_tokens": "length", "cancelled": "stop"}

COMPLETION = "text_completion"
CHAT = "chat.completion"


def completion_id(job: GenerationJob, kind: str) -> str:
    return f"{'cmpl' if kind == COMPLETION else 'chatcmpl'}-{job.id}"


def finish_reason(answer: Answer | None) -> str | None:
    return _FINISH_REASON.get(answer.stop_reason) if answer else None


def usage(job: GenerationJob, answer: Answer | None) -> dict:
    prompt, completion = len(job.prompt_token_ids), len(answer.token_ids) if answer else 0
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": job.cached_prompt_tokens or 0},
    }


def pathfinder(job: GenerationJob) -> dict:
    """What makes the answer auditable: the job, its trail and how speculation went."""
    trail = trail_for_job(job)
    return {
        "job_id": str(job.id),
        "status": job.status,
        "trail_id": str(trail.id) if trail else None,
        "record_count": trail.record_count if trail else 0,
        "head_hash": trail.head_hash if trail else None,
        "drafted": job.drafted,
        "accepted": job.accepted,
        "acceptance_rate": round(job.acceptance_rate, 6),
    }


def _base(job: GenerationJob, kind: str, object_name: str) -> dict:
    return {
        "id": completion_id(job, kind),
        "object": object_name,
        "created": int(job.created_at.timestamp()),
        "model": job.model_spec.name,
    }


def logprobs(kind: str, entries: list[TokenLogprob] | None, *, text_offset: int = 0):
    """A choice's `logprobs`: null unless the request asked for them."""
    if entries is None:
        return None
    if kind == COMPLETION:
        return completion_logprobs(entries, text_offset=text_offset)
    return chat_logprobs(entries)


def response(job: GenerationJob, kind: str, entries: list[TokenLogprob] | None = None) -> dict:
    answer = job_answer(job)
    text = answer.text if answer else ""
    if kind == COMPLETION:
        choice = {"index": 0, "text": text}
    else:
        choice = {"index": 0, "message": {"role": "assistant", "content": text}}
    choice["logprobs"] = logprobs(kind, entries)
    choice["finish_reason"] = finish_reason(answer)
    body = {
        **_base(job, kind, kind),
        "choices": [choice],
        "usage": usage(job, answer),
        "pathfinder": pathfinder(job),
    }
    return as_declared(CompletionOut if kind == COMPLETION else ChatCompletionOut, body)


def answered(job: GenerationJob, kind: str, top: int | None) -> dict:
    """A finished job's response body, with each token's log-probability and its `top` most
    probable alternatives when the request asked (`top` None: it did not)."""
    entries = None
    if top is not None:
        tokenizer = tokenizers.tokenizer_for(job.model_spec)
        entries = token_logprobs(job_decisions(job), tokenizer, top)
    return response(job, kind, entries)


def chunk(job: GenerationJob, kind: str, text: str, *, first: bool = False, logprobs=None) -> dict:
    """One stream chunk carrying a text delta (its tokens' records are committed) and, when
    asked, the log-probabilities of the tokens relayed since the last chunk."""
    if kind == COMPLETION:
        choice = {"index": 0, "text": text, "logprobs": logprobs, "finish_reason": None}
        return {**_base(job, kind, COMPLETION), "choices": [choice]}
    delta = {"role": "assistant", "content": text} if first else {"content": text}
    choice = {"index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": None}
    return {**_base(job, kind, "chat.completion.chunk"), "choices": [choice]}


def last_chunk(
    job: GenerationJob,
    answer: Answer | None,
    kind: str,
    text: str,
    *,
    first: bool,
    logprobs=None,
) -> dict:
    """The closing chunk: the rest of the text, the finish reason and the audit object."""
    body = chunk(job, kind, text, first=first, logprobs=logprobs)
    body["choices"][0]["finish_reason"] = finish_reason(answer)
    body["pathfinder"] = pathfinder(job)
    return body


def usage_chunk(job: GenerationJob, answer: Answer | None, kind: str) -> dict:
    """Sent after the last chunk when stream_options.include_usage asks, as OpenAI does."""
    object_name = COMPLETION if kind == COMPLETION else "chat.completion.chunk"
    return {**_base(job, kind, object_name), "choices": [], "usage": usage(job, answer)}

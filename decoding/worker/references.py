"""What a worker remembers of a matter's recent jobs, for the copying drafter to copy from.

A reviewer's second question about a document repeats the document, and its answer often
repeats an earlier answer; the prompt-lookup drafter finds those runs here as well as in the
job's own context. Only a job's own matter is ever searched: one matter's text never appears
in another's drafts (nor, so, in its records). Bounded by PATHFINDER_DRAFT_REFERENCE_TOKENS per
worker process, least recently used jobs out first; a worker that restarts starts empty, and
each worker remembers only the jobs it ran (docs/models.md, "Prompt cache and several workers").
A worker's jobs of several sequences end and start on threads of their own: every read and
write of the store holds its lock (iterating it while another job's end evicted an entry raised).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence

import numpy as np
from django.conf import settings

from decoding.engine import Reference

_remembered: OrderedDict[str, tuple[int, Reference]] = OrderedDict()  # job id -> (matter, tokens)
_tokens = 0
_lock = threading.Lock()


def references_for(matter_id: int, *, excluding: str | None = None) -> list[Reference]:
    """The matter's remembered jobs, most recent first."""
    with _lock:
        return [
            reference
            for job_id, (matter, reference) in reversed(_remembered.items())
            if matter == matter_id and job_id != excluding
        ]


def remember(matter_id: int, job_id: str, token_ids: Sequence[int]) -> None:
    """Keep a finished job's prompt and output as a reference for its matter's later jobs."""
    global _tokens
    capacity = settings.PATHFINDER_DRAFT_REFERENCE_TOKENS
    tokens = np.asarray(token_ids, dtype=np.int64)
    with _lock:
        if job_id in _remembered:
            _tokens -= len(_remembered.pop(job_id)[1].tokens)
        if len(tokens) > capacity:
            return
        while _remembered and _tokens + len(tokens) > capacity:
            _, (_, evicted) = _remembered.popitem(last=False)
            _tokens -= len(evicted.tokens)
        _remembered[job_id] = (matter_id, Reference(job_id, tokens))
        _tokens += len(tokens)


def forget_matter(matter_id: int) -> int:
    """Drop the matter's remembered jobs (its texts were destroyed); returns how many."""
    global _tokens
    with _lock:
        jobs = [job for job, (matter, _) in _remembered.items() if matter == matter_id]
        for job in jobs:
            _tokens -= len(_remembered.pop(job)[1].tokens)
    return len(jobs)


def forget_all() -> None:
    global _tokens
    with _lock:
        _remembered.clear()
        _tokens = 0

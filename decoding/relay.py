"""Following a job from the web process: its committed tokens as they land, then its end.

Tokens are read from committed DecisionRecord rows, never from the worker directly, so nothing
reaches a client before its record exists (invariant 1). Worker notices (decoding.events) only
say when to look again.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

from audit.models import DecisionRecord
from decoding import events
from decoding.models import GenerationJob


class JobTimeout(Exception):
    """The job did not finish within the time the caller would wait."""


@dataclass(frozen=True)
class Progress:
    token_ids: list[int]  # tokens of records committed since the last Progress
    job: GenerationJob  # the job row as read before those records

    @property
    def finished(self) -> bool:
        return self.job.status in GenerationJob.FINISHED


def follow(job_id: uuid.UUID, *, timeout: float) -> Iterator[Progress]:
    """Yield at every look: the tokens committed since the last (often none), until a last
    Progress once the job ended.

    The job row is read before the records: once it says finished, every record was already
    committed (the seal comes after them), so the last read misses none.
    """
    next_seq = 0
    for _ in events.wakeups(job_id, timeout=timeout):
        job = GenerationJob.objects.select_related("model_spec").get(pk=job_id)
        tokens: list[int] = []
        if job.trail_id is not None:
            rows = (
                DecisionRecord.objects.filter(trail_id=job.trail_id, seq__gte=next_seq)
                .order_by("seq")
                .values_list("seq", "kind", "payload")
            )
            for seq, kind, payload in rows:
                if kind == DecisionRecord.Kind.DECISION:
                    tokens.extend(json.loads(payload)["emitted"])
                next_seq = seq + 1
        progress = Progress(tokens, job)
        yield progress
        if progress.finished:
            return
    raise JobTimeout(f"job {job_id} did not finish within {timeout:g} s")


def wait(job_id: uuid.UUID, *, timeout: float) -> GenerationJob:
    """The job once it has ended; JobTimeout if it has not within `timeout` seconds."""
    for _ in events.wakeups(job_id, timeout=timeout):
        job = GenerationJob.objects.select_related("model_spec").get(pk=job_id)
        if job.status in GenerationJob.FINISHED:
            return job
    raise JobTimeout(f"job {job_id} did not finish within {timeout:g} s")

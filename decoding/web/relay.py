"""Following a job from the web process: its committed tokens as they land, then its end.

Tokens are read from committed DecisionRecord rows, never from the worker directly, so nothing
reaches a client before its record exists (invariant 1). Worker notices, heard once for the process
(decoding.web.follower), only say when to look again.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from audit.selectors import trail_decisions_since
from decoding.models import GenerationJob
from decoding.web.follower import FOLLOWER


class JobTimeout(Exception):
    """The job did not finish within the time the caller would wait."""


class AttemptChanged(Exception):
    """The job moved to a new attempt (its worker died) after tokens of the old one were
    relayed: the new attempt's trail cannot continue them."""


@dataclass(frozen=True)
class Progress:
    decisions: list[dict]  # decision payloads committed since the last Progress, parsed
    job: GenerationJob  # the job row as read before those records

    @property
    def token_ids(self) -> list[int]:
        return [token for payload in self.decisions for token in payload["emitted"]]

    @property
    def finished(self) -> bool:
        return self.job.status in GenerationJob.FINISHED


def follow(
    job_id: uuid.UUID, *, timeout: float, check: Callable[[], None] | None = None
) -> Iterator[Progress]:
    """Yield at every look: the tokens committed since the last (often none), until a last
    Progress once the job ended. `check` is called before every look and may raise to end
    the wait (decoding.web.waiting.watch).

    The job row is read before the records: once it says finished, every record was already
    committed (the seal comes after them), so the last read misses none.
    """
    trail_id, next_seq, relayed = None, 0, False
    for _ in FOLLOWER.wakeups(job_id, timeout=timeout):
        if check is not None:
            check()
        job = GenerationJob.objects.select_related("model_spec").get(pk=job_id)
        if job.trail_id != trail_id:
            # A new attempt: from its first record if nothing was relayed yet, else never a mix.
            if relayed:
                raise AttemptChanged(
                    f"job {job_id} moved to attempt {job.attempts} after part of its answer was "
                    "sent; that part came from an abandoned attempt. Fetch the job for its answer."
                )
            trail_id, next_seq = job.trail_id, 0
        decisions: list[dict] = []
        if trail_id is not None:
            decisions, next_seq = trail_decisions_since(trail_id=trail_id, seq=next_seq)
        progress = Progress(decisions, job)
        relayed = relayed or bool(progress.token_ids)
        yield progress
        if progress.finished:
            return
    raise JobTimeout(f"job {job_id} did not finish within {timeout:g} s")


def wait(
    job_id: uuid.UUID, *, timeout: float, check: Callable[[], None] | None = None
) -> GenerationJob:
    """The job once it has ended; JobTimeout if it has not within `timeout` seconds. `check` is
    called before every look and may raise to end the wait."""
    for _ in FOLLOWER.wakeups(job_id, timeout=timeout):
        if check is not None:
            check()
        job = GenerationJob.objects.select_related("model_spec").get(pk=job_id)
        if job.status in GenerationJob.FINISHED:
            return job
    raise JobTimeout(f"job {job_id} did not finish within {timeout:g} s")

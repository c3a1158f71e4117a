"""The attempts a worker process is decoding: their leases renewed and cancels read together.

Each running attempt holds a lease on its job row, renewed while it decodes, and stops at a step
boundary when a cancel was requested or its job was taken over. A worker decoding several jobs
at once did that per job, two queries every STEP_CHECK_S from each job's thread: sixteen jobs
made 160 queries a second, a sixth of their threads' busy time (py-spy, 2026-12-04). Here one
round renews every attempt of the process in one UPDATE and reads them all in one SELECT, on the
thread of whichever job reaches its boundary once the last round is STEP_CHECK_S old: the round
runs on a decoding thread's own connection (and inside its transaction, in tests), and rounds
stop when every job stops stepping, so a worker stuck inside a native call still loses its
leases. An attempt's lease is renewed only if it stepped since the previous round.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import reduce
from operator import or_

from django.db.models import Q

from decoding import lifecycle
from decoding.models import GenerationJob

# A running attempt's row is looked at (lease renewed, cancel read) at most this often.
STEP_CHECK_S = 0.2


class LostOwnership(Exception):
    """This attempt's job was taken over (its lease lapsed) or finished elsewhere: stop."""


@dataclass(eq=False)
class Watch:
    """One running attempt as the rounds see it."""

    job_id: uuid.UUID
    attempt: int
    stepped: bool = True  # passed a step boundary since the last round
    cancelled: bool = False
    lost: bool = False

    def step(self) -> bool:
        """At a step boundary: whether a cancel was requested; LostOwnership once the job is
        another attempt's."""
        self.stepped = True
        LEASES.look()
        if self.lost:
            raise LostOwnership(str(self.job_id))
        return self.cancelled


class Leases:
    def __init__(self) -> None:
        self._watches: set[Watch] = set()
        self._lock = threading.Lock()  # the set of watches
        self._round = threading.Lock()  # one round at a time
        self._last = float("-inf")

    @contextmanager
    def watching(self, job_id: uuid.UUID, attempt: int) -> Iterator[Watch]:
        watch = Watch(uuid.UUID(str(job_id)), attempt)
        with self._lock:
            self._watches.add(watch)
        try:
            yield watch
        finally:
            with self._lock:
                self._watches.discard(watch)

    def look(self) -> None:
        """Run a round when the last is STEP_CHECK_S old and no other thread is running one."""
        if time.monotonic() - self._last < STEP_CHECK_S or not self._round.acquire(blocking=False):
            return
        try:
            if time.monotonic() - self._last >= STEP_CHECK_S:
                self._renew()
                self._last = time.monotonic()
        finally:
            self._round.release()

    def _renew(self) -> None:
        with self._lock:
            watches = list(self._watches)
        if not watches:
            return
        stepped = [w for w in watches if w.stepped]
        for watch in stepped:
            watch.stepped = False
        if stepped:
            _owned(stepped).update(lease_expires_at=lifecycle.lease_until())
        # An attempt's ownership only ever ends, so a row still owned now was owned when renewed.
        rows = dict(
            ((pk, attempts), cancel)
            for pk, attempts, cancel in _owned(watches).values_list(
                "pk", "attempts", "cancel_requested_at"
            )
        )
        for watch in watches:
            key = (watch.job_id, watch.attempt)
            watch.lost = key not in rows
            watch.cancelled = watch.cancelled or (not watch.lost and rows[key] is not None)


def _owned(watches: list[Watch]):
    """The job rows these attempts still run (lifecycle.owned for several at once)."""
    either = reduce(or_, (Q(pk=w.job_id, attempts=w.attempt) for w in watches))
    return GenerationJob.objects.filter(either, status=GenerationJob.Status.RUNNING)


LEASES = Leases()

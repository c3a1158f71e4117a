"""The jobs a web process's callers wait for, followed once for the whole process: the web-side
twin of decoding.worker.leases.

A waiting request (a /v1 call, a stream) used to follow its own job: with notices, over a Redis
subscription of its own (a connection each, up to PATHFINDER_WEB_MAX_WAITING per process);
without, by reading its job row every POLL_S (twenty reads a second a caller). Here a caller
reads its job when it may have moved, and at least every WAKE_S (to notice its client leaving),
and:

- with notices (PATHFINDER_EVENTS_URL), one thread per process holds one subscription, to the
  pattern every job's channel matches, and wakes the callers of the job a notice names. A pattern
  is subscribed once, not per caller, so no caller's read can race its own subscription; the
  cost is that each web process hears every job's notice (a few dozen bytes, dropped after a
  dictionary lookup when none of its callers waits on that job);
- without notices (the embedded default), one round reads every followed job's progress in one
  SELECT, every POLL_S, on the thread of whichever caller is waiting then (as leases run their
  rounds: on a request's own connection, inside its transaction in tests), and wakes the
  callers whose job moved.

A wake-up only says "look again": the caller reads committed records itself (decoding.web.relay),
so a lost or early notice can delay a chunk, never release one before its record exists; a lost
one delays it at most WAKE_S. While the subscription is down, callers fall back to the rounds.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field

from django.conf import settings
from django.db.models import OuterRef, Subquery

from audit.models import Trail
from decoding import events
from decoding.models import GenerationJob

logger = logging.getLogger(__name__)

# A caller looks at least every WAKE_S; without notices the rounds run every POLL_S.
WAKE_S = 0.5
POLL_S = 0.05


@dataclass(eq=False)
class _Caller:
    job_id: str
    moved: threading.Event = field(default_factory=threading.Event)
    seen: tuple | None = None  # the job's progress as the last round read it


class Follower:
    def __init__(self) -> None:
        self._callers: dict[str, set[_Caller]] = defaultdict(set)
        self._lock = threading.Lock()  # the callers
        self._round = threading.Lock()  # one round at a time
        self._last = float("-inf")
        self._listener: _Listener | None = None

    def wakeups(self, job_id, *, timeout: float) -> Iterator[None]:
        """Yield at once, then whenever the job may have moved on and at least every WAKE_S
        (the caller's own checks: has its client left, is the process stopping), until
        `timeout` seconds pass."""
        deadline = time.monotonic() + timeout
        caller = _Caller(str(job_id))
        with self._lock:
            self._callers[caller.job_id].add(caller)
        try:
            listener = self._listening()
            while True:
                yield
                if not self._until_moved(caller, listener, deadline):
                    return
        finally:
            with self._lock:
                callers = self._callers[caller.job_id]
                callers.discard(caller)
                if not callers:
                    del self._callers[caller.job_id]

    def _until_moved(self, caller: _Caller, listener: _Listener | None, deadline: float) -> bool:
        """Wait until the caller's job may have moved, WAKE_S passed or the deadline came (the
        caller then looks a last time); False once the deadline has passed. While the
        subscription is down (or there is none) the wait runs the rounds."""
        if time.monotonic() >= deadline:
            return False
        look_by = min(deadline, time.monotonic() + WAKE_S)
        while not caller.moved.is_set():
            left = look_by - time.monotonic()
            if left <= 0:
                break
            if listener is not None and listener.subscribed.is_set():
                caller.moved.wait(left)
            else:
                self.look()
                caller.moved.wait(min(POLL_S, left))
        caller.moved.clear()  # before the caller's read: a notice during the read wakes it again
        return True

    def wake(self, job_id: str) -> None:
        """A notice for `job_id`: wake its callers, if any wait here."""
        with self._lock:
            callers = list(self._callers.get(job_id, ()))
        for caller in callers:
            caller.moved.set()

    def look(self) -> None:
        """Run a round when the last is POLL_S old and no other thread is running one."""
        if time.monotonic() - self._last < POLL_S or not self._round.acquire(blocking=False):
            return
        try:
            if time.monotonic() - self._last >= POLL_S:
                self._read_progress()
                self._last = time.monotonic()
        finally:
            self._round.release()

    def _read_progress(self) -> None:
        with self._lock:
            callers = {job_id: list(group) for job_id, group in self._callers.items()}
        if not callers:
            return
        records = Trail.objects.filter(pk=OuterRef("trail_id")).values("record_count")[:1]
        rows = (
            GenerationJob.objects.filter(pk__in=list(callers))
            .annotate(records=Subquery(records))
            .values_list("pk", "status", "attempts", "trail_id", "records")
        )
        for pk, *progress in rows:
            for caller in callers.get(str(pk), ()):
                if caller.seen != tuple(progress):
                    caller.seen = tuple(progress)
                    caller.moved.set()

    def _listening(self) -> _Listener | None:
        """This process's listener, started at the first caller (and again in a forked child,
        which inherits no threads); None without notices. Until it has subscribed, callers
        run the rounds, which read the rows themselves and so miss nothing."""
        url = settings.PATHFINDER_EVENTS_URL
        if not url:
            self._listener = None  # a listener of an earlier URL stops at its next look
            return None
        with self._lock:
            listener = self._listener
            if listener is None or listener.pid != os.getpid() or listener.url != url:
                listener = self._listener = _Listener(url, self)
                listener.start()
        return listener


class _Listener(threading.Thread):
    """The process's one subscription: every job notice, dispatched to its callers. Reconnects
    after an error; meanwhile callers fall back to the rounds."""

    def __init__(self, url: str, follower: Follower) -> None:
        super().__init__(name="job-notices", daemon=True)
        self.url = url
        self.pid = os.getpid()
        self.subscribed = threading.Event()
        self._follower = follower

    def run(self) -> None:
        while self._current():
            try:
                self._listen()
            except Exception as exc:
                logger.warning("job notices unavailable, polling", extra={"error": str(exc)})
            self.subscribed.clear()
            time.sleep(1.0)

    def _current(self) -> bool:
        """Whether this is still the process's listener (a changed events URL replaces it)."""
        return self._follower._listener is self

    def _listen(self) -> None:
        pubsub = events.client(self.url).pubsub()
        try:
            pubsub.psubscribe(events.EVERY_JOB)
            while self._current():
                message = pubsub.get_message(timeout=1.0)
                if message is None:
                    continue
                if message["type"] == "psubscribe":
                    self.subscribed.set()
                elif message["type"] == "pmessage":
                    job_id = events.job_of(message["channel"])
                    if job_id is not None:
                        self._follower.wake(job_id)
        finally:
            pubsub.close()


FOLLOWER = Follower()

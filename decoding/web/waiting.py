"""A web process's callers that wait for their jobs (a /v1 request, a stream): how many it holds,
and when a wait ends early because its caller left or the service is stopping.

A waiting request holds one of the web process's threads. PATHFINDER_WEB_MAX_WAITING bounds how
many may, below the thread count, so health checks, the portal and other keys are always served,
and divides them between matters (docs/fair-share.md, rule 2), so one matter's keys cannot hold
them all.
Under WSGI a request never hears that its client left; gunicorn hands the view its socket
(`gunicorn.socket`), and a peek at it tells.
"""

from __future__ import annotations

import functools
import select
import signal
import socket
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Iterator

from django.conf import settings

from decoding import fair_share
from decoding.fair_share import OverCapacity

# The peer shut its side (Linux); elsewhere a zero-byte peek tells.
_RDHUP = getattr(select, "POLLRDHUP", 0)
# Set once this process was asked to stop (gunicorn's SIGTERM): every wait ends at its next look.
STOPPING = threading.Event()


class CallerGone(Exception):
    """The waiting request's client closed its connection."""


class ServiceStopping(Exception):
    """This web process is shutting down; the wait ends now rather than when the job does."""


class _Shelf:
    """A web process's wait slots, shared between matters by fair share's rule 2
    (fair_share.may_take_wait_slot)."""

    def __init__(self, size: int):
        self.size = size
        self._held: Counter = Counter()
        self._lock = threading.Lock()

    def take(self, matter_id) -> bool:
        with self._lock:
            if not fair_share.may_take_wait_slot(self._held, matter_id, self.size):
                return False
            self._held[matter_id] += 1
            return True

    def give_back(self, matter_id) -> None:
        with self._lock:
            self._held[matter_id] -= 1
            if not self._held[matter_id]:
                del self._held[matter_id]


@functools.cache
def _shelf(size: int) -> _Shelf:
    return _Shelf(size)


class WaitSlot:
    """One of this process's PATHFINDER_WEB_MAX_WAITING slots for the matter, taken at once or
    OverCapacity; release() is idempotent, so the view and the response's close can both call
    it."""

    def __init__(self, matter_id):
        self._shelf = _shelf(settings.PATHFINDER_WEB_MAX_WAITING)
        self._matter_id = matter_id
        if not self._shelf.take(matter_id):
            raise OverCapacity(
                "PATHFINDER_WEB_MAX_WAITING",
                "this server holds as many waiting requests as it may for this matter; "
                "retry shortly.",
                1,
            )
        self._held = True
        self._lock = threading.Lock()

    def release(self) -> None:
        with self._lock:
            if self._held:
                self._held = False
                self._shelf.give_back(self._matter_id)

    def __enter__(self) -> WaitSlot:
        return self

    def __exit__(self, *exc) -> None:
        self.release()


class HeldWhileStreaming:
    """A streaming body that keeps its wait slot until the response is closed (Django closes
    an iterable that has close(), even one it never started)."""

    def __init__(self, chunks: Iterable[bytes], slot: WaitSlot):
        self._chunks = chunks
        self._slot = slot

    def __iter__(self) -> Iterator[bytes]:
        return iter(self._chunks)

    def close(self) -> None:
        try:
            close = getattr(self._chunks, "close", None)
            if close is not None:
                close()
        finally:
            self._slot.release()


def watch(request) -> Callable[[], None]:
    """A check for a wait's every look: CallerGone once the client closed its connection,
    ServiceStopping once this process is stopping."""
    sock = request.META.get("gunicorn.socket")

    def check() -> None:
        if STOPPING.is_set():
            raise ServiceStopping("the service is stopping")
        if sock is not None and _closed(sock):
            raise CallerGone("the client closed its connection")

    return check


def _closed(sock: socket.socket) -> bool:
    """Whether the peer closed its side (bytes it sent before leaving do not hide that)."""
    poller = select.poll()
    try:
        poller.register(sock, select.POLLIN | _RDHUP)
        events = [event for _, event in poller.poll(0)]
    except (OSError, ValueError):
        return True  # the socket is gone already
    hangup = _RDHUP | select.POLLHUP | select.POLLERR | select.POLLNVAL
    if any(event & hangup for event in events):
        return True
    if _RDHUP or not events:
        return False
    try:  # without POLLRDHUP: readable with nothing to read is the end of the stream
        return sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


def stop_waiting_on(signum: int = signal.SIGTERM) -> None:
    """Make `signum` also end every wait of this process (then do what it did before): called
    in each gunicorn worker, so a graceful stop takes seconds, not the longest wait."""
    previous = signal.getsignal(signum)

    def handler(number, frame):
        STOPPING.set()
        if callable(previous):
            previous(number, frame)

    signal.signal(signum, handler)

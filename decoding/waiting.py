"""A web process's callers that wait for their jobs (a /v1 request, a stream): how many it holds,
and when a wait ends early because its caller left or the service is stopping.

A waiting request holds one of the web process's threads. PATHFINDER_WEB_MAX_WAITING bounds how
many may, below the thread count, so health checks, the portal and other keys are always served.
Under WSGI a request never hears that its client left; gunicorn hands the view its socket
(`gunicorn.socket`), and a peek at it tells.
"""

from __future__ import annotations

import functools
import select
import signal
import socket
import threading
from collections.abc import Callable, Iterable, Iterator

from django.conf import settings

from decoding.admission import OverCapacity

# The peer shut its side (Linux); elsewhere a zero-byte peek tells.
_RDHUP = getattr(select, "POLLRDHUP", 0)
# Set once this process was asked to stop (gunicorn's SIGTERM): every wait ends at its next look.
STOPPING = threading.Event()


class CallerGone(Exception):
    """The waiting request's client closed its connection."""


class ServiceStopping(Exception):
    """This web process is shutting down; the wait ends now rather than when the job does."""


@functools.cache
def _slots(size: int) -> threading.BoundedSemaphore:
    return threading.BoundedSemaphore(size)


class WaitSlot:
    """One of this process's PATHFINDER_WEB_MAX_WAITING slots, taken at once or OverCapacity;
    release() is idempotent, so the view and the response's close can both call it."""

    def __init__(self):
        self._semaphore = _slots(settings.PATHFINDER_WEB_MAX_WAITING)
        if not self._semaphore.acquire(blocking=False):
            raise OverCapacity(
                "PATHFINDER_WEB_MAX_WAITING",
                "this server holds as many waiting requests as it may; retry shortly.",
                1,
            )
        self._held = True
        self._lock = threading.Lock()

    def release(self) -> None:
        with self._lock:
            if self._held:
                self._held = False
                self._semaphore.release()

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

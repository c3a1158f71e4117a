"""Notices from workers to web processes that a job's committed state moved on.

A notice carries no tokens, only "look again": the web process reads committed records from the
database, so a notice that is lost or early can delay a chunk but never release one before its
record exists. Over Redis pub/sub when PATHFINDER_EVENTS_URL names a server; without one (the
embedded default) web processes poll.
"""

from __future__ import annotations

import functools
import logging
import time
import uuid
from collections.abc import Iterator

from django.conf import settings

logger = logging.getLogger(__name__)

# With notices a waiter still looks every WAKE_S (a lost notice delays at most that); without
# them it polls every POLL_S.
WAKE_S = 0.5
POLL_S = 0.05


@functools.cache
def _client(url: str):
    import redis

    return redis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2)


def _channel(job_id: uuid.UUID | str) -> str:
    return f"pathfinder:job:{job_id}"


def publish(job_id: uuid.UUID | str) -> None:
    """Tell waiters that the job has new committed records or has finished."""
    url = settings.PATHFINDER_EVENTS_URL
    if not url:
        return
    try:
        _client(url).publish(_channel(job_id), b"1")
    except Exception as exc:  # a lost notice only delays a waiter until its next look
        logger.warning(
            "could not publish a job notice", extra={"job_id": str(job_id), "error": str(exc)}
        )


def wakeups(job_id: uuid.UUID | str, *, timeout: float) -> Iterator[None]:
    """Yield at once, then whenever the job may have moved on, until `timeout` seconds pass.

    The subscription starts before the first yield, so a notice published after the caller's
    first read is never missed.
    """
    deadline = time.monotonic() + timeout
    pubsub = _subscribe(job_id)
    try:
        while True:
            yield
            left = deadline - time.monotonic()
            if left <= 0:
                return
            if pubsub is None:
                time.sleep(min(POLL_S, left))
            else:
                _wait(pubsub, min(WAKE_S, left))
    finally:
        if pubsub is not None:
            pubsub.close()


def _subscribe(job_id):
    url = settings.PATHFINDER_EVENTS_URL
    if not url:
        return None
    try:
        pubsub = _client(url).pubsub(ignore_subscribe_messages=True)
        pubsub.subscribe(_channel(job_id))
        return pubsub
    except Exception as exc:
        logger.warning("job notices unavailable, polling", extra={"error": str(exc)})
        return None


def _wait(pubsub, seconds: float) -> None:
    try:
        if pubsub.get_message(timeout=seconds) is not None:
            while pubsub.get_message(timeout=0) is not None:  # one look serves them all
                pass
    except Exception:
        time.sleep(POLL_S)

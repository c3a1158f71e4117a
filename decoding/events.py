"""Notices from workers to web processes that a job's committed state moved on.

A notice carries no tokens, only "look again": the web process reads committed records from the
database, so a notice that is lost or early can delay a chunk but never release one before its
record exists. Over Redis pub/sub when PATHFINDER_EVENTS_URL names a server; without one (the
embedded default) web processes poll. A web process hears them through one subscription
(decoding.web.follower).
"""

from __future__ import annotations

import functools
import logging
import uuid

from django.conf import settings

logger = logging.getLogger(__name__)

_PREFIX = "pathfinder:job:"
# The pattern every job's channel matches.
EVERY_JOB = _PREFIX + "*"


@functools.cache
def client(url: str):
    import redis

    return redis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2)


def _channel(job_id: uuid.UUID | str) -> str:
    return f"{_PREFIX}{job_id}"


def job_of(channel: bytes | str) -> str | None:
    """The job id a notice's channel names (None for any other channel)."""
    name = channel.decode() if isinstance(channel, bytes) else channel
    return name[len(_PREFIX) :] if name.startswith(_PREFIX) else None


def publish(job_id: uuid.UUID | str) -> None:
    """Tell waiters that the job has new committed records or has finished."""
    url = settings.PATHFINDER_EVENTS_URL
    if not url:
        return
    try:
        client(url).publish(_channel(job_id), b"1")
    except Exception as exc:  # a lost notice only delays a waiter until its next look
        logger.warning(
            "could not publish a job notice", extra={"job_id": str(job_id), "error": str(exc)}
        )

"""Run periodic work in one place at a time: a named lease in the database.

Celery beat may run twice (two deployments, a restart overlapping), and the same task may be
delivered twice; the lease makes the second runner skip instead of doing the work again.
Work woken by events rather than a clock (run_coalesced) must not lose a wake-up that arrives
mid-run: the skipped runner asks the holder to run once more.
"""

from __future__ import annotations

import datetime as dt
import os
import socket
from collections.abc import Callable
from typing import TypeVar

from django.db import IntegrityError, transaction
from django.utils import timezone

from .models import TaskLock

T = TypeVar("T")


def _holder() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def lock_acquire(name: str, ttl_s: float) -> bool:
    """Take the lease for ttl_s seconds unless someone holds an unexpired one."""
    now = timezone.now()
    until = now + dt.timedelta(seconds=ttl_s)
    taken = TaskLock.objects.filter(name=name, locked_until__lte=now).update(
        holder=_holder(), locked_until=until
    )
    if taken:
        return True
    try:
        with transaction.atomic():
            TaskLock.objects.create(name=name, holder=_holder(), locked_until=until)
    except IntegrityError:
        return False  # it exists and is held
    return True


def lock_release(name: str) -> None:
    TaskLock.objects.filter(name=name, holder=_holder()).update(locked_until=timezone.now())


def run_exclusively(name: str, ttl_s: float, work: Callable[[], T]) -> T | None:
    """work() under the lease, or None (without running it) when another runner holds it."""
    if not lock_acquire(name, ttl_s):
        return None
    try:
        return work()
    finally:
        lock_release(name)


def run_coalesced(name: str, ttl_s: float, work: Callable[[], T]) -> T | None:
    """work() under the lease, as run_exclusively; a call that finds the lease held asks the
    holder to run work() once more when it ends, so what changed after the holder began is
    never left for the next clock tick. Returns the last run's result, or None if it only asked.

    Ordering: the ask is written before the lease is tried, and the holder clears it before it
    works and reads it after it releases, so every ask is either seen by a run that starts after
    it or answered by the asker taking the lease itself."""
    TaskLock.objects.filter(name=name).update(asked_again=True)
    result = None
    while lock_acquire(name, ttl_s):
        try:
            TaskLock.objects.filter(name=name).update(asked_again=False)
            result = work()
        finally:
            lock_release(name)
        if not TaskLock.objects.filter(name=name, asked_again=True).exists():
            break
    return result

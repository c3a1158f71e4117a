"""A value recomputed at most every PATHFINDER_OPS_CACHE_S seconds in this process, so a storm
of probes or scrapes costs the broker and the database one computation per interval."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Generic, TypeVar

from django.conf import settings

T = TypeVar("T")


class Recent(Generic[T]):
    def __init__(self, compute: Callable[[], T]):
        self._compute = compute
        self._lock = threading.Lock()  # concurrent callers share one computation
        self._value: T | None = None
        self._at = float("-inf")

    def get(self) -> T:
        with self._lock:
            if time.monotonic() - self._at >= settings.PATHFINDER_OPS_CACHE_S:
                self._value, self._at = self._compute(), time.monotonic()
            return self._value

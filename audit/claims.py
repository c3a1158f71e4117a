"""Where verification finds what the serving side claims about each job
(audit.evidence.binding.Claim).

The audit store must not depend on the app that serves jobs (it outlives them), so that app
registers its source when it loads (decoding.apps). Without one, job rows are not checked and
every report says so.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator
from typing import Protocol

from .evidence.binding import Claim


class ClaimsSource(Protocol):
    def for_trails(self, trail_ids: Collection[str]) -> list[Claim]:
        """The claims of every job whose row points at one of these trails."""

    def dangling(self) -> Iterator[tuple[str, str]]:
        """(job id, trail id) of every job whose row points at a trail that does not exist."""


_source: ClaimsSource | None = None


def register(source: ClaimsSource) -> None:
    global _source
    _source = source


def source() -> ClaimsSource | None:
    return _source

"""A worker forgets what a matter's jobs left in it once the matter's content is destroyed
(reviewers.destruction): the jobs it remembers for copied drafts, the saved prompts, the KV
cells, the draft statistics (docs/adr/0029).

It is told two ways. At once, by a broadcast to every worker (`forget_matter`, a control
command in pathfinder_site.celery), which a threads-pool or solo worker answers from the
process that decodes. And before each job, by the matter's count of destructions
(Matter.destructions, read with the job): a process that saw a lower count for the job's matter
forgets it before the job can start from anything it left; that covers a prefork pool's
children, which a broadcast does not reach, and a worker the broadcast missed.
"""

from __future__ import annotations

import threading

from decoding.models import Matter

from . import references, runtime

_known: dict[int, int] = {}  # matter id -> the count of destructions this process acted on
_lock = threading.Lock()


def forget_matter(matter_id: int) -> int:
    """Drop everything the matter's jobs left in this process; returns the jobs remembered for
    it that were dropped."""
    dropped = references.forget_matter(matter_id)
    for models in runtime.loaded_models():
        models.forget_wall(matter_id)
    return dropped


def catch_up(matter: Matter) -> None:
    """Before a job of `matter`: forget the matter if it was destroyed in since this process
    last looked. A matter first seen here holds nothing here yet."""
    with _lock:
        known = _known.get(matter.pk)
        _known[matter.pk] = matter.destructions
    if known is not None and known < matter.destructions:
        forget_matter(matter.pk)

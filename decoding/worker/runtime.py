"""The models a worker decodes with: loaded lazily, once per process, cached by spec.

A worker's first job on a spec pays the load (weights, hashes, the verify-cost measurement);
later jobs find the models warm. A worker with a threads pool decodes as many jobs at once as it
has threads (PATHFINDER_WORKER_SEQUENCES, or `-c N`): a llama.cpp target then gets a SequenceEngine
with one sequence slot per thread, and each job decodes on a slot of its own. A prefork worker
(PATHFINDER_WORKER_SEQUENCES=1) decodes one job at a time per process on the target itself.

Whatever a job leaves for the next (a slot's cells, saved prompts, a model's live cache, what
copied drafts' acceptance taught the schedule) is kept behind its matter's wall: a job sees the
models through `sequence(wall=...)`, `job_drafter(wall)` and `schedule(..., wall=...)`, and
another matter's job never starts from, is timed by, or drafts from it (docs/adr/0024).
"""

from __future__ import annotations

import atexit
import threading
import time
from collections import Counter
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from django.conf import settings

from decoding import fair_share, metrics
from decoding.engine import (
    AdaptiveSchedule,
    Drafter,
    DraftSchedule,
    FixedSchedule,
    MatchSchedule,
    MatchStatistics,
    PromptLookupDrafter,
    Provider,
    Tokenizer,
    measure_verify_cost,
)
from decoding.kinds import files
from decoding.kinds.registry import DRAFTER_KINDS, PROVIDER_KINDS
from decoding.kinds.stub import StubKind
from decoding.models import ModelSpec

if TYPE_CHECKING:
    from decoding.engine.providers.llamacpp_sequences import SequenceEngine


@dataclass
class LoadedModels:
    spec_name: str
    drafter: Drafter
    target: Provider
    tokenizer: Tokenizer | None
    # Seconds per verify of n positions, measured at load for an adaptive spec (else None).
    verify_cost: dict[int, float] | None
    # What copied drafts' acceptance by match length has been on this worker, job after job,
    # per matter: it sets the draft lengths a later job's records show. A few floats a matter,
    # kept for the process's life, as a worker's loaded models are.
    match_statistics: dict[Hashable, MatchStatistics] = field(default_factory=dict)
    # The jobs' shared passes over the target, on a worker decoding several jobs at once.
    engine: SequenceEngine | None = None

    @contextmanager
    def sequence(self, *, wall: Hashable, background: bool = False) -> Iterator[Provider]:
        """The target as one job behind `wall` sees it: a slot of the sequence engine (held until
        the job is done; a background job's steps yield to interactive ones), or the target
        itself on a worker decoding one job at a time."""
        if self.engine is None:
            yield self.target.walled(wall)
            return
        with self.engine.open(wall=wall, background=background) as sequence:
            yield sequence

    def job_drafter(self, wall: Hashable) -> Drafter:
        return self.drafter.for_generation().walled(wall)

    def retire(self) -> None:
        if self.engine is not None:
            self.engine.retire()

    def forget_wall(self, wall: Hashable) -> None:
        """Drop everything the wall's jobs left in these models (decoding.worker.forgetting)."""
        self.match_statistics.pop(wall, None)
        if self.engine is not None:
            self.engine.forget_wall(wall)
        self.target.forget_wall(wall)
        self.drafter.forget_wall(wall)

    @property
    def drafts_from_references(self) -> bool:
        """Whether jobs may draft from the matter's earlier jobs: prompt lookup with an adaptive
        schedule. A fixed schedule is the reproducible mode, drafting from the context only, so
        a seed gives the same step structure, and so the same text, on any worker."""
        return bool(self.verify_cost) and isinstance(self.drafter, PromptLookupDrafter)

    def schedule(self, draft_length: int, target: Provider, *, wall: Hashable) -> DraftSchedule:
        """A fresh per-request schedule up to draft_length: driven by each copied draft's match
        for prompt lookup, by the acceptance so far for a draft model (both on the measured
        verify cost, priced as the whole pass `target` shares with its neighbours), or fixed at
        draft_length."""
        if not self.verify_cost:
            return FixedSchedule(draft_length)
        neighbours = target.neighbours
        if isinstance(self.drafter, PromptLookupDrafter):
            statistics = self.match_statistics.setdefault(wall, MatchStatistics())
            return MatchSchedule(draft_length, self.verify_cost, statistics, neighbours=neighbours)
        return AdaptiveSchedule(draft_length, verify_cost=self.verify_cost, neighbours=neighbours)


_loaded: dict[tuple[int, object], LoadedModels] = {}
_loading = (
    threading.Lock()
)  # the jobs a worker of several sequences starts at once load a spec once
# Jobs this process decodes at once (decoding.tasks sets it from the worker's pool).
_sequences = 1


def set_worker_sequences(sequences: int) -> None:
    """How many jobs this process decodes at once: a threads pool's size, else 1."""
    global _sequences
    _sequences = max(1, sequences)


class NoFairSlot(Exception):
    """The worker's last free sequence slot is kept for another matter's waiting job."""


_held: Counter = Counter()  # this process's running jobs, by matter
_held_lock = threading.Lock()


@contextmanager
def matter_slot(matter_id, others_waiting: Callable[[object], bool]) -> Iterator[None]:
    """Hold one of this worker's sequence slots for a job of `matter_id` while it runs. A matter
    holding every other slot may not take the last one while others_waiting(matter_id) says
    another matter has a job queued (fair share's rule 6, fair_share.keeps_last_slot):
    NoFairSlot, and the job goes back to the queue."""
    with _held_lock:
        if fair_share.keeps_last_slot(_sequences, _held, matter_id, others_waiting):
            raise NoFairSlot(f"the last of {_sequences} slots is kept for another matter")
        _held[matter_id] += 1
    try:
        yield
    finally:
        with _held_lock:
            _held[matter_id] -= 1


def models_for(spec: ModelSpec) -> tuple[LoadedModels, float]:
    """The spec's models and how long this call spent loading them (0 when warm), in ms."""
    key = (spec.pk, spec.updated_at)  # an edited spec is loaded afresh
    with _loading:
        if key in _loaded:
            return _loaded[key], 0.0
        started = time.perf_counter()
        _release_loaded()  # one spec resident per worker process; memory is the scarce resource
        _loaded[key] = _load(spec)
        return _loaded[key], (time.perf_counter() - started) * 1000


def loaded_models() -> list[LoadedModels]:
    with _loading:
        return list(_loaded.values())


def _release_loaded() -> None:
    # A job still decoding on the old spec keeps its models until it is done.
    for models in _loaded.values():
        models.retire()
    _loaded.clear()


def preload_default() -> str | None:
    """Load the default spec's models now, at a worker's start in the process that decodes, so
    its first job finds them warm. The spec's name, or None when there is no such spec."""
    spec = ModelSpec.objects.filter(name=settings.PATHFINDER_DEFAULT_MODEL).first()
    if spec is None:
        return None
    models_for(spec)
    return spec.name


@atexit.register
def _release_models() -> None:
    # Free llama.cpp models while its bindings still exist (not during interpreter teardown).
    _release_loaded()
    files.release()


def _load(spec: ModelSpec) -> LoadedModels:
    kind = PROVIDER_KINDS[spec.provider]
    target = kind.build(
        spec.path, spec.revision, spec.provider_settings or {}, spec.name, draft=False
    )
    tokenizer = getattr(target, "tokenizer", None)
    drafter = DRAFTER_KINDS[spec.drafter].build(spec, target)
    verify_cost = None
    if spec.draft_schedule == ModelSpec.Schedule.ADAPTIVE and spec.provider != StubKind.name:
        verify_cost = measure_verify_cost(
            target, curve_context(tokenizer), positions=CURVE_POSITIONS
        )
    engine = kind.sequence_engine(target, _sequences) if _sequences > 1 else None
    if engine is not None:
        engine.on_pass = metrics.engine_pass
    return LoadedModels(spec.name, drafter, target, tokenizer, verify_cost, engine=engine)


# The verify-cost curve is measured at load on this build and machine, at every draft length a
# schedule weighs most often and more sparsely beyond, on top of a context as long as a typical
# question's (attention grows with it): about two seconds of a worker's start.
CURVE_POSITIONS = (1, 2, 3, 4, 5, 6, 7, 9, 12, 16)
CURVE_CONTEXT_TOKENS = 512


def curve_context(tokenizer: Tokenizer) -> list[int]:
    """The context the curve is timed on: a sentence repeated to CURVE_CONTEXT_TOKENS tokens."""
    sentence = tokenizer.encode("The verify cost is measured once, when the model loads. ")
    return (sentence * (CURVE_CONTEXT_TOKENS // len(sentence) + 1))[:CURVE_CONTEXT_TOKENS]

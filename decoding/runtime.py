"""The models a worker decodes with: loaded lazily, once per process, cached by spec.

A worker's first job on a spec pays the load (weights, hashes, the verify-cost measurement);
later jobs find the models warm. One job decodes at a time per process (Celery concurrency 1
per process), so the providers' KV caches are never shared between two running jobs.
"""

from __future__ import annotations

import atexit
import time
from dataclasses import dataclass, field

from django.conf import settings

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


@dataclass
class LoadedModels:
    spec_name: str
    drafter: Drafter
    target: Provider
    tokenizer: Tokenizer | None
    # Seconds per verify of n positions, measured at load for an adaptive spec (else None).
    verify_cost: dict[int, float] | None
    # What copied drafts' acceptance by match length has been on this worker, job after job.
    match_statistics: MatchStatistics = field(default_factory=MatchStatistics)

    @property
    def drafts_from_references(self) -> bool:
        """Whether jobs may draft from the matter's earlier jobs: prompt lookup with an adaptive
        schedule. A fixed schedule is the reproducible mode, drafting from the context only, so
        a seed gives the same step structure, and so the same text, on any worker."""
        return bool(self.verify_cost) and isinstance(self.drafter, PromptLookupDrafter)

    def schedule(self, draft_length: int) -> DraftSchedule:
        """A fresh per-request schedule up to draft_length: driven by each copied draft's match
        for prompt lookup, by the acceptance so far for a draft model (both on the measured
        verify cost), or fixed at draft_length."""
        if not self.verify_cost:
            return FixedSchedule(draft_length)
        if isinstance(self.drafter, PromptLookupDrafter):
            return MatchSchedule(draft_length, self.verify_cost, self.match_statistics)
        return AdaptiveSchedule(draft_length, verify_cost=self.verify_cost)


_loaded: dict[tuple[int, object], LoadedModels] = {}


def models_for(spec: ModelSpec) -> tuple[LoadedModels, float]:
    """The spec's models and how long this call spent loading them (0 when warm), in ms."""
    key = (spec.pk, spec.updated_at)  # an edited spec is loaded afresh
    if key in _loaded:
        return _loaded[key], 0.0
    started = time.perf_counter()
    _loaded.clear()  # one spec resident per worker process; memory is the scarce resource
    _loaded[key] = _load(spec)
    return _loaded[key], (time.perf_counter() - started) * 1000


def tokenizer_for(spec: ModelSpec) -> Tokenizer | None:
    """The spec's tokenizer without the model (the web process tokenises prompts with it)."""
    return PROVIDER_KINDS[spec.provider].tokenizer(spec.path)


@atexit.register
def _release_models() -> None:
    # Free llama.cpp models while its bindings still exist (not during interpreter teardown).
    _loaded.clear()
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
    return LoadedModels(spec.name, drafter, target, tokenizer, verify_cost)


# The verify-cost curve is measured at load on this build and machine, at every draft length a
# schedule weighs most often and more sparsely beyond, on top of a context as long as a typical
# question's (attention grows with it): about two seconds of a worker's start.
CURVE_POSITIONS = (1, 2, 3, 4, 5, 6, 7, 9, 12, 16)
CURVE_CONTEXT_TOKENS = 512


def curve_context(tokenizer: Tokenizer) -> list[int]:
    """The context the curve is timed on: a sentence repeated to CURVE_CONTEXT_TOKENS tokens."""
    sentence = tokenizer.encode("The verify cost is measured once, when the model loads. ")
    return (sentence * (CURVE_CONTEXT_TOKENS // len(sentence) + 1))[:CURVE_CONTEXT_TOKENS]


def vocab_size(spec: ModelSpec) -> int:
    tokenizer = tokenizer_for(spec)
    return tokenizer.vocab_size if tokenizer is not None else settings.PATHFINDER_STUB_VOCAB_SIZE

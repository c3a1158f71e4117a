"""Pathfinder's speculative decoding engine: pure Python and numpy, no Django.

A drafter proposes tokens, the target verifies them in one pass, an exact rule decides what is
kept, and every step is recorded through an audit sink before its tokens are released.
"""

from .decoder import AuditSink, AuditUnavailable, GenerationResult, SpeculativeDecoder
from .drafters import (
    Draft,
    Drafter,
    DraftModelDrafter,
    DraftSource,
    PromptLookupDrafter,
    Reference,
)
from .grammar import ResponseFormat, ResponseFormatError
from .params import PARAM_NAMES, Bounds, GenerationParams, GenerationRequest, bounds_of
from .providers import ModelIdentity, Provider, StubProvider
from .records import StepRecord, params_payload
from .rng import uniform
from .schedule import (
    AdaptiveSchedule,
    DraftSchedule,
    FixedSchedule,
    MatchSchedule,
    MatchStatistics,
    ReplayOverrun,
    ReplaySchedule,
    measure_verify_cost,
)
from .tokenizer import Tokenizer
from .version import ENGINE_VERSION

__all__ = [
    "ENGINE_VERSION",
    "PARAM_NAMES",
    "AdaptiveSchedule",
    "AuditSink",
    "AuditUnavailable",
    "Bounds",
    "Draft",
    "DraftModelDrafter",
    "DraftSchedule",
    "DraftSource",
    "Drafter",
    "FixedSchedule",
    "GenerationParams",
    "GenerationRequest",
    "GenerationResult",
    "MatchSchedule",
    "MatchStatistics",
    "ModelIdentity",
    "PromptLookupDrafter",
    "ResponseFormat",
    "ResponseFormatError",
    "Reference",
    "ReplayOverrun",
    "ReplaySchedule",
    "Provider",
    "SpeculativeDecoder",
    "StepRecord",
    "params_payload",
    "StubProvider",
    "bounds_of",
    "Tokenizer",
    "measure_verify_cost",
    "uniform",
]

"""How many tokens to draft at each step: a fixed length, or one chosen from the acceptance so far.

A schedule holds the state of one request: give each generate() call its own instance. It only
chooses how many tokens are drafted, never which ones or whether they are kept, so every schedule
leaves the output distribution exact (docs/architecture.md, invariant 3). A replay should use the
draft length each record states, not re-run the schedule: its cost curve is a wall-clock
measurement.
"""

from __future__ import annotations

import math
import statistics
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence

import numpy as np

from .drafters.base import Draft
from .providers.base import ALONE, Neighbours, Provider

VerifyCost = Callable[[int], float] | Mapping[int, float]


class DraftSchedule(ABC):
    @abstractmethod
    def next_length(self, max_length: int) -> int:
        """Tokens to draft at the next step, in 0..max_length (the request's draft_length)."""

    def keep(self, draft: Draft) -> int:
        """How many of the drafter's tokens to verify (a draft's tokens, cut to a prefix)."""
        return len(draft.tokens)

    @abstractmethod
    def observe(self, drafted: int, accepted: int) -> None:
        """The outcome of a step: tokens the drafter proposed and how many the target kept."""


class FixedSchedule(DraftSchedule):
    """Always the same draft length (the request's draft_length when the caller names none)."""

    def __init__(self, length: int) -> None:
        if length < 0:
            raise ValueError(f"length must be at least 0, got {length}")
        self.length = length

    def next_length(self, max_length: int) -> int:
        return min(self.length, max_length)

    def observe(self, drafted: int, accepted: int) -> None:
        pass


class ReplayOverrun(Exception):
    """A replay asked for a step beyond the recorded run: the two runs diverged."""


class ReplaySchedule(DraftSchedule):
    """The draft lengths a recorded run used, step by step, so a replay meets the same kernels
    (an adaptive schedule decides from measured timings, which a replay must not re-decide)."""

    def __init__(self, lengths: Sequence[int]) -> None:
        self._lengths = list(lengths)
        self._step = 0

    def next_length(self, max_length: int) -> int:
        if self._step >= len(self._lengths):
            raise ReplayOverrun(f"the recorded run has no step {self._step}")
        length = self._lengths[self._step]
        self._step += 1
        return length

    def observe(self, drafted: int, accepted: int) -> None:
        pass


def interpolated(table: Mapping[int, float]) -> Callable[[int], float]:
    """A cost function from measured points {positions: cost}: linear between them, the first
    point's cost below them, the last segment's line (never falling) beyond them."""
    if not table:
        raise ValueError("the verify-cost table is empty")
    table = {int(positions): float(cost) for positions, cost in table.items()}  # JSON keys too
    for positions, cost in table.items():
        if positions < 1 or not math.isfinite(cost) or cost <= 0:
            raise ValueError(f"verify cost {cost!r} at {positions} positions is not a time > 0")
    xs = np.array(sorted(table), dtype=np.float64)
    ys = np.array([table[int(x)] for x in xs], dtype=np.float64)
    slope = max(0.0, (ys[-1] - ys[-2]) / (xs[-1] - xs[-2])) if len(xs) > 1 else 0.0

    def cost(positions: int) -> float:
        if positions > xs[-1]:  # np.interp would clamp; a longer verify costs more
            return float(ys[-1] + slope * (positions - xs[-1]))
        return float(np.interp(positions, xs, ys))

    return cost


class StepCost:
    """What a step costs for each number of drafted tokens, and what the rest of its pass yields.

    Alone, a step drafting k tokens costs verify_cost(k + 1). In a sequence engine's pass every
    sequence is padded to the widest request (decoding.engine.providers.llamacpp_sequences), so a
    step drafting k tokens beside n neighbours carries (n + 1) * (k + 1) positions, priced on the
    measured curve at that total (extrapolated on its last segment beyond it). The neighbours
    count one token each, the least a step yields, so a sequence widens the pass only where its
    own expected tokens pay for slowing every neighbour's step. The padding a neighbour's wider
    request leaves is not counted as free: sequences that each filled the others' padding would
    keep every pass wide with drafts none of them pays for (measured: 2.7 positions per sequence
    per pass at 16 sequences, where no draft paid).
    """

    def __init__(
        self,
        verify_cost: VerifyCost,
        draft_cost_per_token: float = 0.0,
        neighbours: Callable[[], Neighbours] | None = None,
    ) -> None:
        if not math.isfinite(draft_cost_per_token) or draft_cost_per_token < 0:
            raise ValueError(f"draft_cost_per_token must be at least 0, got {draft_cost_per_token}")
        self._curve = interpolated(verify_cost) if isinstance(verify_cost, Mapping) else verify_cost
        self._draft_cost = draft_cost_per_token
        self._neighbours = neighbours
        self._tables: dict[tuple[Neighbours, int], np.ndarray] = {}

    def table(self, max_length: int, neighbours: Neighbours = ALONE) -> np.ndarray:
        """The cost of a step drafting k tokens, for k in 0..max_length."""
        key = (neighbours, max_length)
        if key not in self._tables:
            k = np.arange(max_length + 1)
            positions = (neighbours.sequences + 1) * (k + 1)
            cost = np.array([self._curve(int(p)) for p in positions], dtype=np.float64)
            cost += k * self._draft_cost
            if not np.all(np.isfinite(cost) & (cost > 0)):
                raise ValueError("verify_cost must be a time > 0 for 1..max_length + 1 positions")
            self._tables[key] = cost
        return self._tables[key]

    def now(self, max_length: int) -> tuple[np.ndarray, int]:
        """The costs for the next step, as table(), and the tokens its neighbours yield."""
        neighbours = self._neighbours() if self._neighbours is not None else ALONE
        return self.table(max_length, neighbours), neighbours.sequences


class AdaptiveSchedule(DraftSchedule):
    """The draft length that maximises expected tokens per unit time, given the acceptance so far.

    With per-token acceptance rate a, a step drafting k tokens yields on average
    (1 - a^(k+1)) / (1 - a) tokens (Leviathan et al. 2023, section 3) and costs
    verify_cost(k + 1) + k * draft_cost_per_token; drafting nothing yields 1 token for
    verify_cost(1). The k in 0..max_length with the best ratio is drafted (the shorter on a tie).

    a is an exponential moving average over tested tokens: each accepted token pulls it towards
    1 and the first rejected one towards 0, with weight `smoothing`; tokens after a rejection were
    never tested and do not count. So the length grows while drafts are fully accepted, shrinks
    on rejections, and falls to 0 when acceptance cannot pay for the longer verify pass. At 0
    nothing is learnt, so after `probe_interval` steps without a drafted token (and at the
    first step) it drafts `probe_length` tokens once, and returns to drafting if they are
    accepted.

    verify_cost is in any unit of time (draft_cost_per_token in the same): a function of the
    number of verified positions, or measured points {positions: cost} interpolated linearly
    (see measure_verify_cost). In a shared pass, `neighbours` tells what else the pass carries
    and the step maximises the whole pass's tokens per unit time instead (StepCost); there it never
    probes, since a probe would slow every neighbour's step.
    """

    def __init__(
        self,
        max_length: int,
        verify_cost: VerifyCost,
        draft_cost_per_token: float = 0.0,
        *,
        initial_acceptance: float = 0.7,
        smoothing: float = 0.2,
        probe_interval: int = 10,
        probe_length: int = 2,
        neighbours: Callable[[], Neighbours] | None = None,
    ) -> None:
        if max_length < 0:
            raise ValueError(f"max_length must be at least 0, got {max_length}")
        if not 0 <= initial_acceptance <= 1:
            raise ValueError(f"initial_acceptance must be in [0, 1], got {initial_acceptance}")
        if not 0 < smoothing <= 1:
            raise ValueError(f"smoothing must be in (0, 1], got {smoothing}")
        if probe_interval < 1 or probe_length < 1:
            raise ValueError("probe_interval and probe_length must be at least 1")
        self.max_length = max_length
        self._cost = StepCost(verify_cost, draft_cost_per_token, neighbours)
        self._cost.table(max_length)  # refuses a curve that is not a time > 0 now, not mid-job
        self._smoothing = smoothing
        self._probe_interval = probe_interval
        self._probe_length = probe_length
        self.acceptance = float(initial_acceptance)
        # Steps in a row that drafted nothing. Nothing has been learnt yet at the start either,
        # so if the initial estimate says drafting does not pay, the first step probes.
        self._idle = probe_interval

    def best_length(self, max_length: int | None = None) -> int:
        """The throughput-optimal k for the current acceptance estimate, without probing."""
        return self._choose(max_length)[0]

    def next_length(self, max_length: int) -> int:
        best, neighbours = self._choose(max_length)
        # Alone, a probe is a short bet on recovering a low estimate; in a shared pass it would slow
        # every neighbour's step.
        if best == 0 and self._idle >= self._probe_interval and neighbours == 0:
            return min(self._probe_length, self.max_length, max_length)
        return best

    def _choose(self, max_length: int | None) -> tuple[int, int]:
        cap = self.max_length if max_length is None else min(self.max_length, max_length)
        cost, neighbours = self._cost.now(cap)
        return _best_length(self.acceptance, cost, neighbours), neighbours

    def observe(self, drafted: int, accepted: int) -> None:
        if not 0 <= accepted <= drafted:
            raise ValueError(f"accepted {accepted} of {drafted} drafted tokens")
        if drafted == 0:
            self._idle += 1
            return
        self._idle = 0
        # `accepted` successes, then one failure if the draft was cut short; closed form of the
        # moving average a <- a + smoothing * (outcome - a) applied once per tested token.
        keep = 1 - self._smoothing
        self.acceptance = 1 - (1 - self.acceptance) * keep**accepted
        if accepted < drafted:
            self.acceptance *= keep


# Lower bounds of the match-length buckets MatchSchedule estimates acceptance in: 1-3, 4-7, ...
MATCH_BUCKETS = (1, 4, 8, 16, 32)
# Acceptance each bucket starts from, before anything is observed: a longer match of the text so
# far is likelier to go on. Set before measuring anything; observations replace them within a
# few steps, and they carry over from job to job on a worker (MatchStatistics).
MATCH_PRIORS = (0.5, 0.7, 0.8, 0.9, 0.95)


def match_bucket(match_length: int) -> int:
    return max(i for i, low in enumerate(MATCH_BUCKETS) if match_length >= low)


class MatchStatistics:
    """Per match-length bucket, the acceptance rate of copied drafts, as an exponential moving
    average over tested tokens (see AdaptiveSchedule.observe). One per worker and model, shared
    by the jobs it runs one after another, so what one job learnt the next starts from."""

    def __init__(self, smoothing: float = 0.2) -> None:
        if not 0 < smoothing <= 1:
            raise ValueError(f"smoothing must be in (0, 1], got {smoothing}")
        self.smoothing = smoothing
        self.acceptance = list(MATCH_PRIORS)
        self.idle = [0] * len(MATCH_BUCKETS)  # steps in a row the bucket chose not to draft

    def observe(self, bucket: int, drafted: int, accepted: int) -> None:
        keep = 1 - self.smoothing
        a = 1 - (1 - self.acceptance[bucket]) * keep**accepted
        self.acceptance[bucket] = a * keep if accepted < drafted else a


class MatchSchedule(DraftSchedule):
    """For a copying drafter (its drafts name a DraftSource): ask for the longest draft allowed,
    then keep the prefix that maximises expected tokens per unit time on the verify-cost curve,
    given the acceptance estimated for drafts whose match was as long as this one's. A long
    match drafts the whole continuation the curve can pay for; a step with no match (or one
    whose bucket does not pay) verifies one position only, as plain decoding would. A bucket
    that has not drafted for `probe_interval` of its steps drafts `probe_length` tokens once,
    so an estimate that fell too low can recover. In a shared pass, `neighbours` prices the step as
    the whole pass (StepCost) and there is no probe, as in AdaptiveSchedule.
    """

    def __init__(
        self,
        max_length: int,
        verify_cost: VerifyCost,
        statistics: MatchStatistics | None = None,
        *,
        probe_interval: int = 8,
        probe_length: int = 2,
        neighbours: Callable[[], Neighbours] | None = None,
    ) -> None:
        if max_length < 0:
            raise ValueError(f"max_length must be at least 0, got {max_length}")
        self.max_length = max_length
        self._cost = StepCost(verify_cost, neighbours=neighbours)
        self._cost.table(max_length)  # refuses a curve that is not a time > 0 now, not mid-job
        self.statistics = statistics if statistics is not None else MatchStatistics()
        self._probe_interval, self._probe_length = probe_interval, probe_length
        self._bucket: int | None = None  # the bucket of the draft kept at this step

    def next_length(self, max_length: int) -> int:
        return min(self.max_length, max_length)  # copying costs nothing: keep() decides

    def keep(self, draft: Draft) -> int:
        self._bucket = None
        if draft.source is None or len(draft.tokens) == 0:
            return 0
        bucket = match_bucket(draft.source.match_length)
        cap = min(len(draft.tokens), self.max_length)
        stats = self.statistics
        cost, neighbours = self._cost.now(cap)
        k = _best_length(stats.acceptance[bucket], cost, neighbours)
        if k == 0:
            stats.idle[bucket] += 1
            # Alone, a probe lets an estimate that fell too low recover; in a shared pass it would
            # slow every neighbour's step.
            if stats.idle[bucket] < self._probe_interval or neighbours:
                return 0
            k = min(self._probe_length, cap)
        stats.idle[bucket] = 0
        self._bucket = bucket
        return k

    def observe(self, drafted: int, accepted: int) -> None:
        if not 0 <= accepted <= drafted:
            raise ValueError(f"accepted {accepted} of {drafted} drafted tokens")
        if drafted and self._bucket is not None:
            self.statistics.observe(self._bucket, drafted, accepted)
        self._bucket = None


def _best_length(acceptance: float, step_cost: np.ndarray, others: int = 0) -> int:
    """argmax over k of the pass's tokens, `others` from the neighbours plus this sequence's
    expected (1 - a^(k+1)) / (1 - a), per step_cost[k] (the shortest on ties)."""
    k = np.arange(len(step_cost))
    a = acceptance
    expected = k + 1.0 if a >= 1 else (1 - a ** (k + 1)) / (1 - a)
    return int(np.argmax((others + expected) / step_cost))


def measure_verify_cost(
    provider: Provider,
    context: Sequence[int],
    positions: Iterable[int] = (1, 2, 4, 8, 16),
    *,
    repeats: int = 5,
) -> dict[int, float]:
    """Seconds the provider takes to score n new positions, median of `repeats` calls, per n.

    Call it at model-load time on a warm provider. A context no longer than the largest n is
    repeated until it is longer. Before each timed call the provider sees the context without
    its last n tokens, so a KV cache holds that prefix and the timed call computes n positions,
    as a verify pass does. Every n is evaluated once untimed first (first calls of a shape pay
    for allocations), then the calls go in rounds over every n, each round in the other order
    from the last, so a machine that speeds up or slows down meanwhile (a fresh process, a
    neighbour) moves every n's median alike instead of bending the curve: measured one n after
    another, the first curve of a fresh process put c(2) at 1.01 and then 1.28 of c(1) on the
    same build (2026-12-03).
    """
    positions = sorted(set(positions))
    if not positions or positions[0] < 1:
        raise ValueError(f"positions must be at least 1, got {positions}")
    if not context:
        raise ValueError("the context to time verify passes on is empty")
    tokens = list(context)
    while len(tokens) <= positions[-1]:
        tokens += context

    def timed(n: int) -> float:
        provider.logits(tokens[:-n], 1)
        started = time.perf_counter_ns()
        provider.logits(tokens, n)
        return (time.perf_counter_ns() - started) / 1e9

    for n in positions:  # warm-up: first-call allocations are not a verify cost
        timed(n)
    times: dict[int, list[float]] = {n: [] for n in positions}
    for round_ in range(repeats):
        for n in positions if round_ % 2 == 0 else reversed(positions):
            times[n].append(timed(n))
    return {n: statistics.median(times[n]) for n in positions}

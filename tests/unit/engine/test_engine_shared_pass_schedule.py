"""Draft lengths that know the batch: a step priced as the whole pass its neighbours share.

A sequence alone keeps today's choices; beside neighbours, a draft must pay for widening every
slot of the pass, and no probe widens it.
"""

from decoding.engine import AdaptiveSchedule, MatchSchedule, PromptLookupDrafter
from decoding.engine.params import GenerationParams
from decoding.engine.providers.base import ALONE, Neighbours
from decoding.engine.schedule import StepCost, interpolated

# The worker's load-time curve on the batch-invariant build (ms; bench/results/heldout-2026-12-03).
CURVE = {1: 8.99, 2: 11.7, 4: 12.22, 8: 15.81, 16: 22.06}
# Each extra position costs as much as the first: no draft pays for its verify alone.
STEEP = {1: 10.0, 17: 170.0}


def long_match(k=16):
    context = [*range(10, 50), 5, *range(10, 50)]  # the last 40 tokens occurred before
    drafter = PromptLookupDrafter(64, max_ngram=64)
    drafter.prefill(context, ())
    return drafter.propose(context, k, GenerationParams(), seed=0, step=0)


def test_alone_a_step_costs_its_own_positions_on_the_curve():
    curve = interpolated(CURVE)
    cost = StepCost(CURVE)
    assert cost.table(8).tolist() == [curve(k + 1) for k in range(9)]
    assert cost.now(8)[1] == 0
    assert StepCost(CURVE, neighbours=lambda: ALONE).now(8)[0].tolist() == cost.table(8).tolist()


def test_beside_neighbours_a_step_is_priced_as_every_slot_padded_to_its_width():
    curve = interpolated(CURVE)
    cost = StepCost(CURVE)
    assert cost.table(8, Neighbours(3)).tolist() == [curve(4 * (k + 1)) for k in range(9)]
    assert StepCost(CURVE, neighbours=lambda: Neighbours(3)).now(8)[1] == 3


def test_a_long_copy_drafts_alone_but_not_when_it_would_widen_a_full_pass():
    found = long_match()
    assert MatchSchedule(16, CURVE).keep(found) > 0
    assert MatchSchedule(16, CURVE, neighbours=lambda: Neighbours(1)).keep(found) > 0
    full = MatchSchedule(16, CURVE, neighbours=lambda: Neighbours(15))
    assert full.keep(found) == 0


def test_alone_a_schedule_probes_but_never_in_a_batch():
    found = long_match()
    alone = MatchSchedule(16, STEEP, probe_interval=2)
    batched = MatchSchedule(16, STEEP, probe_interval=2, neighbours=lambda: Neighbours(7))
    for schedule, expected in ((alone, [0, 2, 0, 2, 0, 2]), (batched, [0] * 6)):
        kept = []
        for _ in range(6):
            kept.append(schedule.keep(found))
            schedule.observe(kept[-1], 0)
        assert kept == expected


def test_a_draft_model_switches_drafting_off_at_high_occupancy_and_on_alone():
    occupancy = {"now": Neighbours(15)}
    schedule = AdaptiveSchedule(
        8, CURVE, initial_acceptance=0.9, probe_interval=1, neighbours=lambda: occupancy["now"]
    )
    assert schedule.best_length(8) == schedule.next_length(8) == 0  # no probe either
    occupancy["now"] = ALONE
    assert schedule.best_length(8) > 0

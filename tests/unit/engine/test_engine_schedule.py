"""Draft-length schedules: a fixed length, or the throughput-optimal one for the acceptance seen."""

import pytest

from decoding.engine import (
    AdaptiveSchedule,
    FixedSchedule,
    StubProvider,
    measure_verify_cost,
)
from decoding.engine.schedule import interpolated

# llama.cpp on SmolLM2 on this machine: ms to verify 1, 9 and 17 positions.
LLAMA_MS = {1: 8.0, 9: 34.0, 17: 63.0}


def lengths_while(schedule, outcome, steps, max_length=8):
    """Drive the schedule with outcome(k) -> accepted tokens; return the lengths it chose."""
    chosen = []
    for _ in range(steps):
        k = schedule.next_length(max_length)
        chosen.append(k)
        schedule.observe(k, outcome(k))
    return chosen


def all_accepted(k):
    return k


def none_accepted(k):
    return 0


def test_a_fixed_schedule_drafts_its_length_within_the_request_limit():
    schedule = FixedSchedule(4)
    assert [schedule.next_length(m) for m in (8, 4, 2, 0)] == [4, 4, 2, 0]
    schedule.observe(4, 0)
    assert schedule.next_length(8) == 4


def test_measured_costs_are_interpolated_linearly_and_extended_beyond_the_last_point():
    cost = interpolated(LLAMA_MS)
    assert [cost(1), cost(5), cost(9), cost(13), cost(17)] == [8.0, 21.0, 34.0, 48.5, 63.0]
    assert cost(21) == 63.0 + 4 * 29 / 8
    assert interpolated({4: 10.0})(1) == interpolated({4: 10.0})(9) == 10.0
    assert interpolated({"1": 8, "9": 34})(5) == 21.0  # a table read back from JSON


def test_it_grows_while_every_drafted_token_is_accepted_up_to_its_maximum():
    chosen = lengths_while(AdaptiveSchedule(8, LLAMA_MS), all_accepted, 30)
    assert chosen[0] >= 1
    assert chosen == sorted(chosen)  # never shrinks on full acceptance
    assert chosen[-1] == 8 and max(chosen) == 8
    assert len(set(chosen)) > 3  # it climbed, not jumped


def test_it_shrinks_on_rejections_down_to_drafting_nothing():
    schedule = AdaptiveSchedule(8, LLAMA_MS)
    lengths_while(schedule, all_accepted, 30)
    chosen = lengths_while(schedule, none_accepted, 8)
    assert chosen[0] == 8
    assert chosen == sorted(chosen, reverse=True)
    assert chosen[-1] == 0 and len(set(chosen)) > 2


def test_it_never_drafts_more_than_its_maximum_or_the_requests():
    schedule = AdaptiveSchedule(5, LLAMA_MS)
    assert max(lengths_while(schedule, all_accepted, 30, max_length=8)) == 5
    assert max(lengths_while(schedule, all_accepted, 5, max_length=3)) == 3
    assert schedule.next_length(0) == 0


def test_whether_drafting_pays_depends_on_the_cost_of_verifying_more_positions():
    # Per-token acceptance 0.35: with llama.cpp's curve one more position costs 40% of a
    # one-token pass, more than the 0.35 tokens it brings; with a flat curve drafting is free.
    llama = AdaptiveSchedule(8, LLAMA_MS, initial_acceptance=0.35)
    flat = AdaptiveSchedule(8, lambda positions: 10.0, initial_acceptance=0.35)
    assert llama.best_length(8) == 0
    assert flat.best_length(8) == flat.next_length(8) == 8
    # At 0.5 acceptance it pays on llama.cpp too, unless each drafted token costs a lot.
    assert AdaptiveSchedule(8, LLAMA_MS, initial_acceptance=0.5).best_length(8) >= 1
    costly = AdaptiveSchedule(8, LLAMA_MS, draft_cost_per_token=5.0, initial_acceptance=0.5)
    assert costly.best_length(8) == 0


def test_when_the_initial_estimate_says_drafting_does_not_pay_the_first_step_probes():
    schedule = AdaptiveSchedule(8, LLAMA_MS, initial_acceptance=0.35, probe_length=2)
    assert schedule.next_length(8) == 2
    schedule.observe(2, 0)
    assert schedule.next_length(8) == 0


def test_at_zero_it_probes_now_and_then_and_resumes_when_probes_are_accepted():
    schedule = AdaptiveSchedule(8, LLAMA_MS, probe_interval=5, probe_length=2)

    # While drafts keep failing: 0 for probe_interval steps, then one probe, again and again.
    chosen = lengths_while(schedule, none_accepted, 40)
    at_zero = chosen[chosen.index(0) :]
    assert at_zero[:18] == ([0] * 5 + [2]) * 3
    assert set(at_zero) == {0, 2}

    # The text turns predictable: the next probe is accepted, and drafting resumes and grows.
    chosen = lengths_while(schedule, all_accepted, 30)
    probe = chosen.index(2)
    assert set(chosen[:probe]) <= {0} and probe <= 5
    assert 0 not in chosen[probe:]
    assert chosen[-1] == 8


def test_a_probe_is_never_longer_than_the_request_allows():
    schedule = AdaptiveSchedule(8, LLAMA_MS, probe_interval=1, probe_length=3)
    lengths_while(schedule, none_accepted, 10)
    schedule.observe(0, 0)
    assert schedule.next_length(1) == 1


def test_the_acceptance_estimate_counts_tested_tokens_only():
    schedule = AdaptiveSchedule(8, LLAMA_MS, initial_acceptance=0.5, smoothing=0.5)
    schedule.observe(4, 1)  # one accepted, one rejected; the two after it were never tested
    assert schedule.acceptance == (1 - 0.5 * 0.5) * 0.5
    schedule.observe(0, 0)  # nothing drafted, nothing learnt
    assert schedule.acceptance == 0.375


@pytest.mark.parametrize(
    ("args", "kwargs"),
    [
        ((-1, LLAMA_MS), {}),
        ((8, {}), {}),
        ((8, {1: 0.0}), {}),
        ((8, LLAMA_MS, -1.0), {}),
        ((8, LLAMA_MS), {"smoothing": 0}),
        ((8, LLAMA_MS), {"initial_acceptance": 1.5}),
        ((8, LLAMA_MS), {"probe_interval": 0}),
    ],
)
def test_it_refuses_settings_that_make_no_sense(args, kwargs):
    with pytest.raises(ValueError):
        AdaptiveSchedule(*args, **kwargs)


def test_it_refuses_an_outcome_with_more_accepted_than_drafted():
    with pytest.raises(ValueError, match="accepted"):
        AdaptiveSchedule(8, LLAMA_MS).observe(2, 3)


class RecordingStub(StubProvider):
    def __init__(self):
        super().__init__()
        self.calls = []

    def logits(self, context, num_positions):
        self.calls.append((tuple(context), num_positions))
        return super().logits(context, num_positions)


def test_measuring_the_verify_cost_times_each_number_of_new_positions():
    provider = RecordingStub()
    context = list(range(20))
    costs = measure_verify_cost(provider, context, positions=(1, 4), repeats=3)
    assert set(costs) == {1, 4}
    assert all(isinstance(c, float) and c > 0 for c in costs.values())
    # Each call that scores n positions follows one over the context without its last n tokens
    # (a warm cache); every n once untimed, then rounds over every n, alternating their order.
    assert provider.calls[0::2] == [(tuple(context[:-n]), 1) for n in (1, 4, 1, 4, 4, 1, 1, 4)]
    scored = [n for _, n in provider.calls[1::2]]
    assert scored == [1, 4, 1, 4, 4, 1, 1, 4]
    assert all(call == tuple(context) for call, _ in provider.calls[1::2])
    # The measured table is what AdaptiveSchedule takes.
    assert AdaptiveSchedule(4, costs).next_length(4) in range(5)


def test_measuring_repeats_a_context_too_short_for_the_largest_position_count():
    provider = RecordingStub()
    costs = measure_verify_cost(provider, [1, 2, 3], positions=(1, 4), repeats=1)
    assert set(costs) == {1, 4}
    assert provider.calls[-1] == ((1, 2, 3, 1, 2, 3), 4)
    with pytest.raises(ValueError, match="empty"):
        measure_verify_cost(provider, [])

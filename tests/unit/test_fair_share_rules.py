"""Fair share's pure rules on their edges (docs/fair-share.md, rules 2, 4 and 6): what a web
process's wait slots, the Batch API feed's turns and a worker's last sequence slot allow, given
the counts the process holds. tests/integration/test_fair_share.py holds the same rules through
the objects that keep those counts."""

from collections import Counter

import pytest

from decoding.fair_share import in_turn, keeps_last_slot, may_take_wait_slot


def taken(held: Counter, matter, size: int) -> int:
    """How many more slots `matter` takes, one after another, before the first refusal."""
    count = 0
    while may_take_wait_slot(held, matter, size):
        held[matter] += 1
        count += 1
    return count


def test_a_matter_alone_takes_three_quarters_of_the_wait_slots_and_another_the_rest():
    held: Counter = Counter()
    assert taken(held, "flood", 12) == 9
    assert taken(held, "other", 12) == 3  # at once, though the flood came first
    assert taken(held, "third", 12) == 0  # every slot is held


def test_as_the_first_matters_waits_end_the_shares_even_out():
    held = Counter({"flood": 9, "other": 3})
    held["flood"] -= 5  # four left: the flood may not take more than half of the nine
    assert not may_take_wait_slot(held, "flood", 12)
    assert taken(held, "other", 12) == 1  # up to its own half: four


@pytest.mark.parametrize("size", [1, 2, 3])
def test_a_small_process_still_admits_a_lone_caller(size):
    assert may_take_wait_slot(Counter(), "alone", size)


def test_turns_go_to_each_matter_in_turn_up_to_the_free_places():
    turns = {"a": ["a1", "a2", "a3"], "b": ["b1"], "c": []}
    assert in_turn(turns, 3) == ["a1", "b1", "a2"]
    assert in_turn(turns, 10) == ["a1", "b1", "a2", "a3"]
    assert in_turn(turns, 0) == []
    assert turns["a"] == ["a1", "a2", "a3"]  # the caller's lists are left as they were


def test_the_last_slot_is_kept_only_from_a_matter_holding_every_other_while_another_waits():
    def waiting(matter):
        return True

    assert keeps_last_slot(4, Counter({"a": 3}), "a", waiting)
    assert not keeps_last_slot(4, Counter({"a": 3}), "a", lambda matter: False)
    assert not keeps_last_slot(4, Counter({"a": 2, "b": 1}), "a", waiting)
    assert not keeps_last_slot(4, Counter({"a": 2}), "a", waiting)  # not the last slot
    assert not keeps_last_slot(1, Counter(), "a", waiting)  # one slot is never kept back


def test_the_database_is_asked_only_when_the_counts_leave_the_question_open():
    def unasked(matter):
        raise AssertionError("others_waiting read the database for nothing")

    assert not keeps_last_slot(4, Counter({"a": 1}), "a", unasked)
    assert not keeps_last_slot(4, Counter({"a": 2, "b": 1}), "b", unasked)

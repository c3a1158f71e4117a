"""The prompt cache's bookkeeping: longest shared prefix, least recently used out, bytes bound."""

import pytest

from decoding.engine.providers.prompt_cache import PromptCache

MATTER, OTHER = "matter-a", "matter-b"


def test_a_lookup_finds_the_saved_prompt_sharing_the_longest_prefix():
    cache = PromptCache(1000)
    cache.put([1, 2, 3, 4], "a", 10, wall=MATTER)
    cache.put([1, 2, 9], "b", 10, wall=MATTER)
    hit = cache.longest([1, 2, 3, 4, 5, 6], wall=MATTER)
    assert (hit.saved.state, hit.shared) == ("a", 4)
    hit = cache.longest([1, 2, 9, 9], wall=MATTER)
    assert (hit.saved.state, hit.shared) == ("b", 3)
    assert cache.longest([7, 1, 2], wall=MATTER) is None


def test_the_least_recently_used_prompt_goes_first_when_room_is_needed():
    cache = PromptCache(30)
    cache.put([1], "a", 10, wall=MATTER)
    cache.put([2], "b", 10, wall=MATTER)
    cache.put([3], "c", 10, wall=MATTER)
    cache.longest([1, 5], wall=MATTER)  # a is used: b is now the oldest
    cache.put([4], "d", 10, wall=MATTER)
    assert cache.longest([2], wall=MATTER) is None
    assert {cache.longest([n], wall=MATTER).saved.state for n in (1, 3, 4)} == {"a", "c", "d"}
    assert cache.nbytes == 30 and len(cache) == 3


def test_a_state_larger_than_the_whole_cache_is_not_kept_and_evicts_nothing():
    cache = PromptCache(30)
    cache.put([1], "a", 10, wall=MATTER)
    assert cache.put([2], "huge", 31, wall=MATTER) is False
    assert cache.longest([1], wall=MATTER).saved.state == "a" and cache.nbytes == 10


def test_saving_the_same_prompt_again_replaces_it():
    cache = PromptCache(30)
    cache.put([1, 2], "old", 10, wall=MATTER)
    cache.put([1, 2], "new", 12, wall=MATTER)
    assert cache.longest([1, 2], wall=MATTER).saved.state == "new"
    assert cache.nbytes == 12 and len(cache) == 1


def test_a_negative_capacity_is_refused():
    with pytest.raises(ValueError, match="capacity_bytes"):
        PromptCache(-1)


def test_a_lookup_behind_another_wall_finds_nothing_of_this_ones():
    cache = PromptCache(1000)
    cache.put([1, 2, 3, 4], "a's document", 10, wall=MATTER)
    assert cache.longest([1, 2, 3, 4, 5], wall=OTHER) is None
    cache.put([1, 2, 3], "b's own", 10, wall=OTHER)
    assert cache.longest([1, 2, 3, 4, 5], wall=OTHER).saved.state == "b's own"
    assert cache.longest([1, 2, 3, 4, 5], wall=MATTER).saved.state == "a's document"


def test_the_same_tokens_behind_two_walls_are_two_entries():
    cache = PromptCache(1000)
    cache.put([1, 2], "a", 10, wall=MATTER)
    cache.put([1, 2], "b", 10, wall=OTHER)
    assert len(cache) == 2 and cache.nbytes == 20
    assert cache.longest([1, 2], wall=MATTER).saved.state == "a"

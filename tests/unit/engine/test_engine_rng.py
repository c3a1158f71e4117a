import hashlib

import pytest

from decoding.engine import uniform

# Golden vectors: if these change, every recorded trail stops replaying.
GOLDEN = [
    ((0, 0, 0, "accept"), 0.43173505769111775),
    ((1, 2, 3, "residual"), 0.5060153165391866),
    ((2**53 - 1, 7, 1, "bonus"), 0.41167557799443),
    ((42, 0, 0, "draft"), 0.5333553674807995),
]


@pytest.mark.parametrize(("key", "expected"), GOLDEN)
def test_uniform_matches_the_golden_vectors(key, expected):
    assert uniform(*key) == expected


@pytest.mark.parametrize(("key", "_"), GOLDEN)
def test_uniform_is_rederived_from_the_documented_formula(key, _):
    seed, step, position, stream = key
    message = f"PF-RNG-v1\0{seed}\0{step}\0{position}\0{stream}".encode()
    top53 = int(hashlib.sha256(message).hexdigest()[:16], 16) >> 11
    assert uniform(*key) == top53 / 2**53
    assert uniform(*key) * 2**53 == top53  # exact: no rounding anywhere


def test_each_stream_step_and_position_draws_independently():
    draws = {
        uniform(seed, step, position, stream)
        for seed in range(3)
        for step in range(3)
        for position in range(3)
        for stream in ("draft", "accept", "residual", "bonus")
    }
    assert len(draws) == 3 * 3 * 3 * 4
    assert all(0 <= u < 1 for u in draws)

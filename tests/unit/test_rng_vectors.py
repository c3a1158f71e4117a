"""The RNG vectors of a sampled trail (tests/data/rng_vectors.json): every draw re-derived from
docs/audit-format.md's formula with hashlib alone, every accept test re-run on the recorded
p, q and u, and the file equal to what the engine writes today (make_rng_vectors.py)."""

import hashlib
import json
import math
from pathlib import Path

from tests.data import make_rng_vectors

VECTORS = json.loads((Path(__file__).parents[1] / "data" / "rng_vectors.json").read_text())


def uniform(seed: int, step: int, position: int, stream: str) -> float:
    """The formula as the doc writes it, and nothing of Pathfinder's."""
    message = b"\x00".join(str(x).encode() for x in ("PF-RNG-v1", seed, step, position, stream))
    return (int.from_bytes(hashlib.sha256(message).digest()[:8], "big") >> 11) / 2**53


def test_every_draw_is_the_documented_formula_written_as_python_repr():
    assert len(VECTORS["draws"]) >= 15
    assert {d["stream"] for d in VECTORS["draws"]} == {"accept", "residual", "bonus"}
    for draw in VECTORS["draws"]:
        value = uniform(draw["seed"], draw["step"], draw["position"], draw["stream"])
        assert draw["u"] == repr(value), draw


def test_each_recorded_acceptance_is_u_below_min_1_p_over_q():
    for decision in VECTORS["decisions"]:
        assert decision["rule"] == "speculative-sampling"
        tested = [t for t in decision["drafted"] if t["u"] is not None]
        for token in tested:
            ratio = float(token["p"]) / float(token["q"])
            assert token["ratio"] == repr(ratio)
            assert token["accepted"] is (float(token["u"]) < min(1.0, ratio))
        assert decision["accepted_count"] == sum(t["accepted"] for t in decision["drafted"])


# numpy's float64 exp takes an AVX-512 path on a CPU that has one and the C library's elsewhere;
# the two differ in the last bit or two of a probability (p, q and their ratio), never in a
# token, a draw or a decision. Those are compared exactly; a probability to within ULPS.
ULPS = 8
PROBABILITIES = {"p", "q", "ratio"}


def same(written, committed, key: str = "") -> bool:
    if isinstance(committed, dict):
        return written.keys() == committed.keys() and all(
            same(written[k], committed[k], k) for k in committed
        )
    if isinstance(committed, list):
        return len(written) == len(committed) and all(map(same, written, committed))
    if key in PROBABILITIES and isinstance(committed, str) and isinstance(written, str):
        a, b = float(written), float(committed)
        return a == b or abs(a - b) <= ULPS * math.ulp(max(abs(a), abs(b)))
    return written == committed


def test_the_committed_vectors_are_what_the_engine_writes():
    written = json.loads(make_rng_vectors.build())
    assert same(written, VECTORS)
    assert written["draws"] == VECTORS["draws"]  # the draws are hashlib's: exact everywhere


def test_a_changed_token_or_a_probability_past_rounding_is_a_difference():
    decision = json.loads(json.dumps(VECTORS["decisions"][0]))
    token = next(t for t in decision["drafted"] if t["u"] is not None)
    token["token"] += 1
    assert not same(decision, VECTORS["decisions"][0])
    token["token"] -= 1
    token["p"] = repr(float(token["p"]) * (1 + 1e-9))
    assert not same(decision, VECTORS["decisions"][0])

"""The RNG vectors of a sampled trail (tests/data/rng_vectors.json): every draw re-derived from
docs/audit-format.md's formula with hashlib alone, every accept test re-run on the recorded
p, q and u, and the file equal to what the engine writes today (make_rng_vectors.py)."""

import hashlib
import json
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


def test_the_committed_vectors_are_what_the_engine_writes():
    assert make_rng_vectors.build() == json.dumps(VECTORS, indent=1, sort_keys=True) + "\n"

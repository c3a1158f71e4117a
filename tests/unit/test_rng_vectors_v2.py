"""The coupled-sampling vectors (tests/data/rng_vectors_v2.json, audit format 5): every draw
re-derived from docs/audit-format.md's formula with hashlib alone, keyed by output position (so
a draw taken twice, as a tested draft token and then as the correction at that position, is the
same number), the decisions passing the verifier's re-check, and the file equal to what the
engine writes today (make_rng_vectors_v2.py)."""

import copy
import hashlib
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from audit.evidence.decision_rule import DecisionRule
from tests.data import make_rng_vectors_v2
from tests.unit.test_rng_vectors import same

VECTORS = json.loads((Path(__file__).parents[1] / "data" / "rng_vectors_v2.json").read_text())


def output_uniform(seed: int, index: int) -> float:
    """The formula as the doc writes it, and nothing of Pathfinder's."""
    message = b"\x00".join(str(x).encode() for x in ("PF-RNG-v2", seed, index, "sample"))
    return (int.from_bytes(hashlib.sha256(message).digest()[:8], "big") >> 11) / 2**53


def test_every_draw_is_the_documented_formula_at_its_output_position():
    assert len(VECTORS["draws"]) >= 10
    for draw in VECTORS["draws"]:
        assert draw["u"] == repr(output_uniform(draw["seed"], draw["index"])), draw
    assert {d["rule"] for d in VECTORS["decisions"]} == {"coupled-sampling"}
    kinds = {d["correction"]["kind"] for d in VECTORS["decisions"]}
    assert kinds == {"coupled", "coupled-bonus"}


NODE = shutil.which("node")
REPO = Path(__file__).parents[2]


def request_of(decisions: list[dict]) -> dict:
    first = decisions[0]
    return {
        "v": 5,
        "models": {"draft": first["draft"], "target": first["target"]},
        "params": {**first["params"], "stop": [], "stream": False},
        "prompt": {"token_count": first["context_length"]},
    }


def python_failures(decisions: list[dict]) -> list[str]:
    rule = DecisionRule(request_of(decisions))
    return [f for d in decisions for f in rule.check(d)]


def a_moved_draw() -> list[dict]:
    """The second decision's draws taken at the step's own count, as the old rule keyed them."""
    forged = copy.deepcopy(VECTORS["decisions"])
    decision = next(d for d in forged[1:] if d["drafted"])
    decision["drafted"][0]["u"] = repr(output_uniform(decision["params"]["seed"], 0))
    return forged


def test_the_decisions_pass_the_recheck_and_a_moved_draw_fails_it():
    assert python_failures(VECTORS["decisions"]) == []
    assert any("is not the RNG's draw" in f for f in python_failures(a_moved_draw()))


@pytest.mark.skipif(NODE is None, reason="node is not installed: decision-rule.js cannot run")
def test_the_page_verifier_agrees(tmp_path):
    for decisions, failing in ((VECTORS["decisions"], False), (a_moved_draw(), True)):
        trail = tmp_path / "trail.json"
        trail.write_text(json.dumps({"request": request_of(decisions), "decisions": decisions}))
        done = subprocess.run(
            [NODE, str(REPO / "tests/js/decision_rule.cjs"), str(trail)],
            capture_output=True, text=True, timeout=60, check=True,
        )  # fmt: skip
        found = json.loads(done.stdout)
        assert bool(found) is failing, found
        if failing:
            assert any("is not the RNG's draw" in f["reason"] for f in found), found


def test_the_committed_vectors_are_what_the_engine_writes():
    written = json.loads(make_rng_vectors_v2.build())
    assert same(written, VECTORS)
    assert written["draws"] == VECTORS["draws"]

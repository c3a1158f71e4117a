"""Regenerate tests/data/rng_vectors_v2.json: the decision records of a coupled-sampling trail
(audit format 5; temperature 1.0, a draft model, seed 42), written by the real engine over its
deterministic stub models, and every draw they used, each with its (seed, index), the output
position it is keyed by. tests/unit/test_rng_vectors_v2.py re-derives every draw with hashlib
alone and fails until the committed file matches what the engine writes.
"""

from pathlib import Path

from decoding.engine import (
    DraftModelDrafter,
    GenerationParams,
    GenerationRequest,
    SpeculativeDecoder,
    StubProvider,
)
from tests.data import make_rng_vectors as v1
from tests.data.make_rng_vectors import PROMPT, SEED, _Collected

HERE = Path(__file__).parent
OUT = HERE / "rng_vectors_v2.json"
FORMAT = 5  # the audit format whose sampled decisions these are


def decisions() -> list[dict]:
    sink = _Collected()
    target = StubProvider(seed=0, name="stub-target", vocab_size=8)
    drafter = DraftModelDrafter(
        StubProvider(seed=0, noise_seed=1, noise=0.5, name="stub-draft", vocab_size=8)
    )
    params = GenerationParams(max_tokens=16, temperature=1.0, seed=SEED, draft_length=4)
    request = GenerationRequest("job-1", PROMPT, params, coupled=True)
    SpeculativeDecoder(drafter, target, sink).generate(request)
    payloads = [{**record.payload(), "v": FORMAT} for record in sink.records]
    for payload in payloads:
        payload["timings_us"] = {"draft": 0, "verify": 0}  # the one field a replay may change
    return payloads


def draws(payloads: list[dict]) -> list[dict]:
    """Every draw a record states, keyed by the output position it is taken at: each tested
    draft token's, then the correction's."""
    found, position = [], 0
    for d in payloads:
        for i, token in enumerate(d["drafted"]):
            if token["u"] is not None:
                found.append(dict(seed=SEED, index=position + i, u=token["u"]))
        found.append(dict(seed=SEED, index=position + d["accepted_count"], u=d["correction"]["u"]))
        position += len(d["emitted"])
    return found


def build() -> str:
    payloads = decisions()
    return v1.build(payloads, draws(payloads))


if __name__ == "__main__":
    OUT.write_text(build(), encoding="utf-8")
    print(f"wrote {OUT}")

"""Regenerate tests/data/rng_vectors.json: the decision records of a sampled trail (temperature
1.0, a draft model, seed 42), written by the real engine over its deterministic stub models, and
every uniform draw they used, each with its (seed, step, position, stream). An outsider checks
their RNG and accept tests against it (docs/audit-format.md, "The decision rule");
tests/unit/test_rng_vectors.py re-derives every draw with hashlib alone and fails until the
committed file matches what the engine writes.
"""

import json
from pathlib import Path

from decoding.engine import (
    AuditSink,
    DraftModelDrafter,
    GenerationParams,
    GenerationRequest,
    SpeculativeDecoder,
    StubProvider,
)

HERE = Path(__file__).parent
OUT = HERE / "rng_vectors.json"
PROMPT = (1, 2, 3, 4, 1, 2, 3, 4, 1, 2)
SEED = 42


class _Collected(AuditSink):
    def __init__(self):
        self.records = []

    def record(self, record) -> None:
        self.records.append(record)


def decisions() -> list[dict]:
    sink = _Collected()
    target = StubProvider(seed=0, name="stub-target", vocab_size=8)
    drafter = DraftModelDrafter(
        StubProvider(seed=0, noise_seed=1, noise=0.5, name="stub-draft", vocab_size=8)
    )
    params = GenerationParams(max_tokens=16, temperature=1.0, seed=SEED, draft_length=4)
    SpeculativeDecoder(drafter, target, sink).generate(GenerationRequest("job-1", PROMPT, params))
    payloads = [record.payload() for record in sink.records]
    for payload in payloads:
        payload["timings_us"] = {"draft": 0, "verify": 0}  # the one field a replay may change
    return payloads


def draws(payloads: list[dict]) -> list[dict]:
    """Every draw a record states: each tested draft token's accept draw, then the correction's."""
    found = []
    for d in payloads:
        for position, token in enumerate(d["drafted"]):
            if token["u"] is not None:
                found.append(
                    dict(
                        seed=SEED, step=d["step"], position=position, stream="accept", u=token["u"]
                    )
                )
        kind = d["correction"]["kind"]
        found.append(
            dict(
                seed=SEED,
                step=d["step"],
                position=d["accepted_count"],
                stream=kind,
                u=d["correction"]["u"],
            )
        )
    return found


def build(payloads: list[dict] | None = None, found: list[dict] | None = None) -> str:
    """The file's text: these vectors' decisions and draws, or another rule's (v2's)."""
    payloads = decisions() if payloads is None else payloads
    found = draws(payloads) if found is None else found
    return json.dumps({"decisions": payloads, "draws": found}, indent=1, sort_keys=True) + "\n"


if __name__ == "__main__":
    OUT.write_text(build(), encoding="utf-8")
    print(f"wrote {OUT}")

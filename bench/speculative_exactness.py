"""Greedy exactness: each system's greedy output against llama.cpp plain's, token for token, and
at the first difference whether the two picks were a near-tie of the single-token logits."""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from bench.speculative_cells import HF, HF_PLD, LOOP, PF_AUDIT, PF_NOAUDIT, PF_SYSTEMS, PLAIN
from bench.speculative_report import fmt
from bench.speculative_runner import Bench

# ARCHITECTURE.md measured one position's logits differing by up to ~0.4 between a verify
# batch and one-token decoding; the gap between two tokens can move by twice that.
NEAR_TIE = 0.8


def first_mismatch(a, b) -> int | None:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def near_tie(bench: Bench, prompt, reference, other, at) -> dict:
    """Single-token logits at the first mismatch: how far apart the two picks are."""
    context = [*prompt, *reference[:at]]
    target = bench.target
    target.logits([bench.flush_token], 1)
    target.logits(context[:-1], 1)  # prefix as a batch, then the last token on its own
    row = target.logits(context, 1)[0]
    top = np.sort(row)[-2:]
    a, b = reference[at], (other[at] if at < len(other) else None)
    return {
        "position": at,
        "reference_token": a,
        "other_token": b,
        "logit_reference": float(row[a]),
        "logit_other": None if b is None else float(row[b]),
        "gap": None if b is None else float(row[a] - row[b]),
        "top2_gap": float(top[1] - top[0]),
    }


def greedy_exactness(bench: Bench, runs: list[dict], chosen_workloads, chosen_temps) -> list[str]:
    """One line per workload and system: identical to llama.cpp plain, or where it departs."""
    exactness = []
    for workload in chosen_workloads:
        if "greedy" not in chosen_temps:
            continue
        by_system = defaultdict(list)
        for r in runs:
            if r["workload"] == workload and r["temperature"] == "greedy":
                by_system[r["system"]].append(r["tokens"])
        reference = by_system[PLAIN][0]
        for system in (LOOP, PF_AUDIT, PF_NOAUDIT, HF, HF_PLD):
            if system not in by_system:
                continue
            outputs = by_system[system]
            stable = all(o == outputs[0] for o in outputs)
            at = first_mismatch(reference, outputs[0])
            if at is None:
                exactness.append(
                    f"{workload}: {system} = llama.cpp plain, all "
                    f"{len(reference)} tokens identical"
                    f"{'' if stable else ' (but repeats differ among themselves)'}."
                )
                continue
            note = ""
            if system in (LOOP, *PF_SYSTEMS):
                tie = near_tie(bench, bench.prompts[workload], reference, outputs[0], at)
                tied = tie["gap"] is not None and abs(tie["gap"]) <= NEAR_TIE
                note = (
                    f" Single-token logits there: plain's pick {tie['reference_token']} "
                    f"{tie['logit_reference']:.3f}, {system}'s pick {tie['other_token']} "
                    f"{fmt(tie['logit_other'], '.3f')} (gap {fmt(tie['gap'], '.3f')}; "
                    f"top-2 gap {tie['top2_gap']:.3f}) — "
                    f"{'a near-tie' if tied else 'NOT a near-tie'} (threshold {NEAR_TIE})."
                )
            exactness.append(
                f"{workload}: {system} differs from llama.cpp plain from output "
                f"position {at} of {len(reference)} on.{note}"
            )
    return exactness

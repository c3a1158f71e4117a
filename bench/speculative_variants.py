"""The drafter and schedule settings section: Pathfinder without audit under other n-gram
ranges and a probe-backoff schedule, against the one-token loop, decode phase only."""

from __future__ import annotations

import statistics

from bench.speculative_analysis import median
from bench.speculative_cells import LOOP, TEMPERATURES
from bench.speculative_runner import Bench

# (label, min_ngram, probe backoff); max_ngram is the default spec's (3), or min_ngram if larger
VARIANTS = [
    ("min_ngram 1, adaptive (the default before migration 0004)", 1, False),
    ("min_ngram 1, adaptive + probe backoff", 1, True),
    ("min_ngram 2, adaptive", 2, False),
    ("min_ngram 3, adaptive (shipped default)", 3, False),
    ("min_ngram 3, adaptive + probe backoff", 3, True),
]


def variants_section(bench: Bench, cells, max_tokens: int, repeats: int, curve) -> dict:
    """Pathfinder without audit under other drafter/schedule settings, against the one-token
    loop, in the same minutes. The prompt stays cached between these runs (the decode phase is
    what is compared, and it is unaffected), so each costs no prefill."""
    runs = []
    labels = [LOOP] + [v[0] for v in VARIANTS]
    for rep in range(repeats):
        for ci, (workload, temp_label) in enumerate(cells):
            prompt, temperature = bench.prompts[workload], TEMPERATURES[temp_label]
            shift = (rep + ci) % len(labels)
            for label in labels[shift:] + labels[:shift]:

                def run(label=label, prompt=prompt, temperature=temperature, rep=rep):
                    if label == LOOP:
                        return bench.run_loop(
                            prompt, temperature, max_tokens, 1000 + rep, cold=False
                        )
                    _, min_ngram, backoff = next(v for v in VARIANTS if v[0] == label)
                    return bench.run_pathfinder(
                        prompt,
                        temperature,
                        max_tokens,
                        1000 + rep,
                        audit=False,
                        curve=curve,
                        min_ngram=min_ngram,
                        backoff=backoff,
                        cold=False,
                    )

                r = bench.guard.measure(run)
                r.update(workload=workload, temperature=temp_label, system=label, repeat=rep)
                runs.append(r)
        print(f"variants: repeat {rep + 1}/{repeats} done", flush=True)
    table = []
    for workload, temp_label in cells:
        mine = [r for r in runs if (r["workload"], r["temperature"]) == (workload, temp_label)]
        rate = {
            label: median(
                [r["decode_tokens"] / (r["decode_ns"] / 1e9) for r in mine if r["system"] == label]
            )
            for label in labels
        }
        for label in labels[1:]:
            rs = [r for r in mine if r["system"] == label]
            table.append(
                {
                    "workload": workload,
                    "temperature": temp_label,
                    "variant": label,
                    "decode_tok_s": rate[label],
                    "loop_tok_s": rate[LOOP],
                    "ratio_loop": rate[label] / rate[LOOP],
                    "acceptance_rate": median(
                        [r["accepted"] / r["drafted"] if r["drafted"] else 0.0 for r in rs]
                    ),
                    "tokens_per_step": median([len(r["tokens"]) / r["steps"] for r in rs]),
                    "mean_k": median([statistics.mean(r["draft_lengths"]) for r in rs]),
                }
            )
    return {"runs": runs, "table": table, "repeats": repeats, "shipped": bench.ngrams}

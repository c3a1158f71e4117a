"""What several draft candidates per step could buy on held-out prompts, before building it.

    .venv/bin/python bench/candidates.py [--out bench/results] [--quick]

Tree (multi-candidate) verification puts several copied continuations, sharing the context, in
one target batch and keeps the longest accepted. Whether it pays here is a matter of two
measurable things: how much longer the best of N candidates is accepted than the longest match
alone, and what the extra positions cost. Both are measured on the held-out prompts
(bench/data/heldout) and the served file:

- Each prompt's greedy output is decoded once (the engine, no audit). Greedy verification
  accepts a drafted token exactly when it is the target's greedy choice there, so any drafting
  policy can be replayed offline against that output, step by step: a candidate is accepted up
  to its agreement with the output, and the step adds the target's own next token.
- The verify-cost curve c(n) of the served file is measured at load; a step that scores n
  positions costs c(n) (a tree of N branches scores its distinct prefixes plus one: the same
  matmuls as one sequence of that many positions; only the attention mask differs).

Policies, each with the draft cut to at most k tokens (k over a grid; the best k reported):
  single      the longest match in the context (the engine's PromptLookupDrafter, its n-grams)
  best of N   the N longest matches with distinct continuations, verified together
  oracle      every match in the context verified, at the cost of the single policy: the
              ceiling of copying from the context, whatever the verification
A step without a match scores one position (the one-token step), in every policy.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from bench.database import setup_database  # noqa: E402
from bench.machine import load_average, run_facts, save_results, wait_for_quiet  # noqa: E402

DEFAULT_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/pathfinder_bench"
POSITIONS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)
K_GRID = (2, 4, 8, 12, 16)
BRANCHES = (1, 2, 3, 4)
WORKLOADS = ("extraction", "summary", "open")


def candidates(history: np.ndarray, min_ngram: int, max_ngram: int) -> list[tuple[int, int]]:
    """(continuation start, match length) of every match of history's last tokens in history,
    at least min_ngram long, longest first and latest first on ties: the order in which
    PromptLookupDrafter takes its one candidate (with the same matching)."""
    from decoding.engine.drafters.prompt_lookup import match_lengths

    ends, length = match_lengths(history, len(history) - 1, history, max_ngram)
    order = sorted(range(len(ends)), key=lambda i: (-length[i], -ends[i]))
    return [(int(ends[i]) + 1, int(length[i])) for i in order if length[i] >= min_ngram]


def agreement(draft: np.ndarray, truth: np.ndarray) -> int:
    n = min(len(draft), len(truth))
    differ = np.flatnonzero(draft[:n] != truth[:n])
    return int(differ[0]) if len(differ) else n


def trie_size(branches: list[np.ndarray]) -> int:
    """Distinct prefixes among the branches: the positions a tree of them scores."""
    return len({tuple(b[: i + 1].tolist()) for b in branches for i in range(len(b))})


def branches_at(history: np.ndarray, k: int, most: int | None, ngrams) -> list[np.ndarray]:
    """The continuations (at most k tokens) of the longest matches, distinct, `most` of them
    (all of them for None)."""
    branches, seen = [], set()
    for start, _ in candidates(history, *ngrams):
        branch = history[start : start + k]
        if len(branch) and tuple(branch.tolist()) not in seen:
            seen.add(tuple(branch.tolist()))
            branches.append(branch)
            if most is not None and len(branches) == most:
                break
    return branches


def replay(prompt: list[int], output: list[int], policy: str, n: int, k: int, ngrams):
    """(tokens made, positions scored) of each step of one policy over one greedy output."""
    tokens = np.array([*prompt, *output], dtype=np.int64)
    at, end, steps = len(prompt), len(prompt) + len(output), []
    while at < end:
        history, truth = tokens[:at], tokens[at:end]
        room = min(k, end - at - 1)  # the step's own token always follows the draft
        branches = branches_at(history, room, None if policy == "oracle" else n, ngrams)
        accepted = max((agreement(b, truth) for b in branches), default=0)
        if policy == "oracle":  # scored as the single longest match would be
            positions = 1 + (len(branches[0]) if branches else 0)
        else:
            positions = 1 + trie_size(branches)
        steps.append((accepted + 1, positions))
        at += accepted + 1
    return steps


def cost_of(curve: dict[int, float], n: int) -> float:
    """c(n) by linear interpolation on the measured curve (and its last slope beyond it)."""
    xs = sorted(curve)
    if n in curve:
        return curve[n]
    if n > xs[-1]:
        a, b = xs[-2], xs[-1]
    else:
        b = next(x for x in xs if x > n)
        a = max(x for x in xs if x < n)
    return curve[a] + (curve[b] - curve[a]) * (n - a) / (b - a)


def simulate(outputs: list[dict], curve, ngrams) -> dict:
    """Per workload, policy and branch count: tokens per step and the decode speed-up over
    plain decoding (one position per token), at the best k, median over prompts and worst."""
    table: dict = {}
    for workload in WORKLOADS:
        items = [o for o in outputs if o["workload"] == workload]
        for policy, counts in (("single", (1,)), ("best of", BRANCHES[1:]), ("oracle", (0,))):
            for n in counts:
                best = None
                for k in K_GRID:
                    speedups, per_step = [], []
                    for item in items:
                        steps = replay(item["prompt"], item["output"], policy, n, k, ngrams)
                        made = sum(t for t, _ in steps)
                        spent = sum(cost_of(curve, p) for _, p in steps)
                        speedups.append(made * curve[1] / spent)
                        per_step.append(made / len(steps))
                    cell = {
                        "k": k,
                        "speedup_median": round(statistics.median(speedups), 3),
                        "speedup_worst": round(min(speedups), 3),
                        "speedup_best": round(max(speedups), 3),
                        "tokens_per_step": round(statistics.median(per_step), 3),
                    }
                    if best is None or cell["speedup_median"] > best["speedup_median"]:
                        best = cell
                name = {"single": "single", "best of": f"best of {n}", "oracle": "oracle"}[policy]
                table.setdefault(workload, {})[name] = best
    return table


def markdown(report: dict) -> str:
    lines = [
        f"# Several draft candidates per step: what they could buy ({report['date']})",
        "",
        f"Command: `{report['command']}` at {report['revision']}. Machine: {report['machine']}. "
        f"Load before {report['load']['before']}, after {report['load']['after']}. Runtime: "
        f"{report['runtime_version']}. Prompts: {report['prompts']} held-out, "
        f"{report['max_tokens']} greedy tokens each; n-grams {report['ngrams']}.",
        "",
        "Speed-up is the decode time plain decoding would take (c(1) per token) over the "
        "replayed policy's (c(positions scored) per step), from the measured verify-cost curve; "
        "median over prompts, worst and best beside it, at the policy's best k.",
        "",
        "| workload | policy | best k | tokens/step | speed-up median | worst | best |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for workload, policies in report["table"].items():
        for name, cell in policies.items():
            lines.append(
                f"| {workload} | {name} | {cell['k']} | {cell['tokens_per_step']:.2f} | "
                f"{cell['speedup_median']:.2f}× | {cell['speedup_worst']:.2f}× | "
                f"{cell['speedup_best']:.2f}× |"
            )
    lines += ["", "Over the single longest match, at each policy's best k:", ""]
    for workload, policies in report["table"].items():
        single = policies["single"]
        tree = max((c for n, c in policies.items() if n.startswith("best of")),
                   key=lambda c: c["speedup_median"])  # fmt: skip
        ceiling = policies["oracle"]
        lines.append(
            f"- {workload}: the best tree {_change(tree, single)}; every match verified for "
            f"free {_change(ceiling, single)}."
        )
    curve = ", ".join(f"c({n}) {ms}" for n, ms in report["curve_ms"].items())
    lines += ["", f"Verify-cost curve of the served file (ms): {curve}.", ""]
    return "\n".join(lines)


def _change(cell: dict, base: dict) -> str:
    tokens = cell["tokens_per_step"] / base["tokens_per_step"] - 1
    speed = cell["speedup_median"] / base["speedup_median"] - 1
    return f"{100 * tokens:+.1f}% tokens per step, {100 * speed:+.1f}% decode speed"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument(
        "--database-url", default=os.environ.get("BENCH_DATABASE_URL", DEFAULT_DATABASE_URL)
    )
    parser.add_argument("--max-load", type=float, default=0.7)
    parser.add_argument("--quick", action="store_true", help="a smoke run; figures meaningless")
    parser.add_argument("--render", type=Path, help="write the markdown of a saved JSON result")
    args = parser.parse_args(argv)
    if args.render:
        args.render.with_suffix(".md").write_text(markdown(json.loads(args.render.read_text())))
        return 0
    setup_database(args.database_url, fresh=False)

    from bench.heldout import prompts
    from bench.peers import Pathfinder
    from decoding.engine import measure_verify_cost
    from decoding.models import ModelSpec

    load = {"before": wait_for_quiet(args.max_load, 600)}
    spec = ModelSpec.objects.get(name="smollm2-135m-instruct")
    engine = Pathfinder(spec, args.threads, 4096)
    warm = engine.target.tokenizer.encode(" ".join(["The verify cost is measured."] * 12))
    curve = measure_verify_cost(engine.target, warm, POSITIONS)
    settings = spec.drafter_settings or {}
    ngrams = (settings.get("min_ngram", 3), settings.get("max_ngram", 32))
    workloads = prompts(engine.target.tokenizer)
    outputs = []
    for workload in WORKLOADS:
        for prompt in workloads[workload][: 1 if args.quick else None]:
            engine.forget()
            run = engine.run(prompt, 16 if args.quick else args.max_tokens, audit=False)
            outputs.append({"workload": workload, "prompt": prompt, "output": run["tokens"]})
            print(f"{workload}: {len(run['tokens'])} tokens", flush=True)
    load["after"] = load_average()
    report = {
        **run_facts("candidates.py"),
        "runtime_version": engine.target.identity.runtime_version,
        "load": load,
        "prompts": len(outputs),
        "max_tokens": args.max_tokens,
        "ngrams": f"{ngrams[0]}-{ngrams[1]}",
        "curve_ms": {n: round(c * 1e3, 2) for n, c in curve.items()},
        "table": simulate(outputs, curve, ngrams),
    }
    text = markdown(report)
    if not args.quick:
        save_results(args.out, "candidates", report, text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

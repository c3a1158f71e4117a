"""What audit formats 3 and 4's sealing costs a decode step, measured side by side in one run.

    .venv/bin/python bench/sealing_cost.py [--prompts N] [--repeats R] [--max-tokens T] [--quick]

Every held-out prompt (bench/data/heldout/prompts.json: extraction, summary, open text; written
before this code) is decoded by the engine as a worker runs the default spec (bench.peers
.Pathfinder, greedy, 2 threads), with the worker's audit sink into PostgreSQL (every step
sealed, as the current format stores it) and without any audit (NullSink), interleaved. The
steps' records, as the engine wrote them, are then stored three ways over the same records: as
format 2 stored a step (canonical JSON of the clear payload), as format 3 does
(audit.store.sealed_decision: one HMAC and one SHA-256 per token slot, then the payload's and
the values' canonical JSON) and as format 4 does (one HMAC and one SHA-256 over the whole
workings).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from bench.database import setup_database  # noqa: E402
from bench.heldout import DEFAULT_DATABASE_URL, prompts  # noqa: E402
from bench.machine import Guard, run_facts, save_results, wait_for_quiet  # noqa: E402

WORKLOADS = ("extraction", "summary", "open")
TIMINGS = 25  # each record stored this many times each way; the median is kept


def per_record_us(records: list[dict], store) -> list[float]:
    """Median µs to store each record with `store`, over TIMINGS tries."""
    out = []
    for payload in records:
        tries = []
        for _ in range(TIMINGS):
            started = time.perf_counter_ns()
            store(payload)
            tries.append(time.perf_counter_ns() - started)
        out.append(statistics.median(tries) / 1000)
    return out


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    parser.add_argument("--prompts", type=int, default=2, help="per workload")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--max-load", type=float, default=0.7)
    parser.add_argument("--quick", action="store_true", help="a smoke run; figures meaningless")
    args = parser.parse_args(argv)
    if args.quick:
        args.prompts, args.repeats, args.max_tokens = 1, 1, 16
    setup_database(os.environ.get("BENCH_DATABASE_URL", DEFAULT_DATABASE_URL), fresh=False)

    from audit.evidence.chain import canonical_json
    from audit.store import sealed_decision
    from bench.peers import Pathfinder
    from decoding.models import ModelSpec

    load = wait_for_quiet(args.max_load, 600)
    guard = Guard(0.12, 3, 600)
    pathfinder = Pathfinder(ModelSpec.objects.get(name="smollm2-135m-instruct"), 2, 4096)
    workloads = prompts(pathfinder.target.tokenizer)
    runs, records = [], []
    for workload in WORKLOADS:
        for index, prompt in enumerate(workloads[workload][: args.prompts]):
            for repeat in range(args.repeats):
                order = (True, False) if repeat % 2 == 0 else (False, True)
                for audit in order:
                    pathfinder.forget()
                    kept: list = []
                    result = guard.measure(
                        lambda a=audit, k=kept, p=prompt: pathfinder.run(
                            p, args.max_tokens, audit=a, kept=k
                        )
                    )
                    if not audit and repeat == 0:
                        records += [record.payload() for record in kept]
                    runs.append({"workload": workload, "prompt": index, "repeat": repeat,
                                 "audit": audit, "decode_ns": result["decode_ns"],
                                 "steps": result["steps"], "audit_ns": result.get("audit_ns", 0),
                                 "cpu_share": result["foreign_cpu_share"]})  # fmt: skip
    salt = "5a" * 32
    clear_us = per_record_us(records, canonical_json)
    sealed_us = per_record_us(records, lambda payload: sealed_decision(payload, salt, 3))
    workings_us = per_record_us(records, lambda payload: sealed_decision(payload, salt, 4))
    plain_steps = [r["decode_ns"] / r["steps"] / 1000 for r in runs if not r["audit"]]
    audited = {(r["workload"], r["prompt"], r["repeat"]): r for r in runs if r["audit"]}
    overhead = [
        (audited[key]["decode_ns"] - r["decode_ns"]) / r["decode_ns"]
        for r in runs
        if not r["audit"] and (key := (r["workload"], r["prompt"], r["repeat"])) in audited
    ]
    step_us = statistics.median(plain_steps)
    added = [s - c for s, c in zip(workings_us, clear_us, strict=True)]
    report = {
        **run_facts("sealing_cost.py"),
        "load": load,
        "records": len(records),
        "slots_per_record": statistics.mean(
            len(r["drafted"]) + 1 + len(r.get("target_top") or []) for r in records
        ),
        "format2_store_us": {
            "median": statistics.median(clear_us),
            "p95": quantile(clear_us, 0.95),
        },
        "format3_store_us": {
            "median": statistics.median(sealed_us),
            "p95": quantile(sealed_us, 0.95),
        },
        "format4_store_us": {
            "median": statistics.median(workings_us),
            "p95": quantile(workings_us, 0.95),
        },
        "added_us": {
            "median": statistics.median(added),
            "p95": quantile(added, 0.95),
            "max": max(added),
        },  # fmt: skip
        "decode_step_us_without_audit": step_us,
        "added_share_of_a_step": statistics.median(added) / step_us,
        "audit_overhead": {
            "median": statistics.median(overhead),
            "worst": max(overhead),
            "best": min(overhead),
        },  # fmt: skip
        "runs": runs,
    }
    us = (
        report["format2_store_us"],
        report["format3_store_us"],
        report["added_us"],
        report["format4_store_us"],
    )
    ran = report["audit_overhead"]
    rows = [
        ("store a step's record as format 2 (canonical JSON, clear)",
         f"{us[0]['median']:.1f} µs", f"{us[0]['p95']:.1f} µs"),
        ("store it as format 3 (`sealed_decision`, a commitment per token)",
         f"{us[1]['median']:.1f} µs", f"{us[1]['p95']:.1f} µs"),
        ("store it as format 4 (`sealed_decision`, the workings whole)",
         f"{us[3]['median']:.1f} µs", f"{us[3]['p95']:.1f} µs"),
        ("added by format 4's sealing", f"{us[2]['median']:.1f} µs",
         f"{us[2]['p95']:.1f} µs (max {us[2]['max']:.1f})"),
        ("a decode step without audit", f"{step_us:.0f} µs", ""),
        ("sealing's share of a step", f"{100 * report['added_share_of_a_step']:.2f}%", ""),
        ("decode time with the audit sink vs without, same prompt and repeat",
         f"{100 * ran['median']:+.1f}%",
         f"worst {100 * ran['worst']:+.1f}%, best {100 * ran['best']:+.1f}%"),
    ]  # fmt: skip
    machine = report["machine"]
    text = "\n".join(
        [
            "# What sealing costs a step (audit formats 3 and 4)",
            "",
            f"Command: `{report['command']}`; revision {report['revision']}; {report['date']}.",
            f"Machine: {machine['cpu']}, {machine['cores']} cores ({machine['simd']}); load "
            f"average before the run {load['before_run'][0]:.2f}.",
            f"Prompts: bench/data/heldout/prompts.json, {args.prompts} per workload "
            f"({', '.join(WORKLOADS)}), {args.repeats} interleaved repeats, greedy, at most "
            f"{args.max_tokens} tokens.",
            "",
            "| figure | median | p95 / worst |",
            "|---|---:|---:|",
            *(f"| {name} | {median} | {worst} |" for name, median, worst in rows),
            "",
            f"{len(records)} records, {report['slots_per_record']:.1f} token slots each on "
            "average. The last row is the whole sink (sealing, serialising, the batched "
            "PostgreSQL commits) against the engine with no audit at all; the rows above it "
            "isolate the sealing, over the same records.",
            "",
        ]
    )
    save_results(args.out, "sealing-cost", report, text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

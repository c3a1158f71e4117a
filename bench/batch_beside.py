"""What a running batch costs an interactive caller: /v1 latency alone, and beside a batch.

    .venv/bin/python bench/batch_beside.py [--calls 40] [--batch-lines 400] [--out bench/results]

The service as deployed (bench/load.py's Stack: gunicorn, one Celery worker decoding
PATHFINDER_WORKER_SEQUENCES=8 jobs at once, PostgreSQL, Redis), each way on a fresh stack so
neither inherits the other's prompt cache or drafts. The same `--calls` held-out /v1/completions
calls (bench/batch.py's review questions over bench/data/heldout), one after another:

  alone    on an idle service
  beside   while a batch of `--batch-lines` other held-out lines runs (PATHFINDER_BATCH_MAX_QUEUED
           lines in flight); the calls start once the batch is in progress, and the batch is
           cancelled after them

Reported: each way's latency p50, p95 and worst, in seconds, the ratio beside/alone of each, and
how many batch lines ended while the calls ran (so a batch that stalled shows).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from functools import partial
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from bench.batch import batch_submit, on_fresh_stack, requests_for  # noqa: E402
from bench.load import percentile  # noqa: E402
from bench.machine import load_average, run_facts, save_results, wait_for_quiet  # noqa: E402


def calls_timed(base: str, headers: dict, bodies: list[dict]) -> list[float]:
    """Each call's seconds, one after another; a call that is not answered 200 stops the run."""
    session, seconds = requests.Session(), []
    for body in bodies:
        started = time.monotonic()
        response = session.post(f"{base}/v1/completions", json=body, headers=headers, timeout=600)
        response.raise_for_status()
        seconds.append(time.monotonic() - started)
    return seconds


def batch_started(base: str, headers: dict, bodies: list[dict]) -> str:
    """A batch over `bodies`, returned once its lines are jobs and the first have ended."""
    batch = batch_submit(base, headers, bodies)
    while batch["status"] == "validating" or not batch["request_counts"]["completed"]:
        time.sleep(0.5)
        batch = requests.get(f"{base}/v1/batches/{batch['id']}", headers=headers, timeout=30).json()
    return batch["id"]


def batch_counts(base: str, headers: dict, batch_id: str) -> dict:
    return requests.get(f"{base}/v1/batches/{batch_id}", headers=headers, timeout=30).json()[
        "request_counts"
    ]


def run_alone(base: str, key: str, calls: list[dict], lines: list[dict]) -> dict:
    return _summary("alone", calls_timed(base, {"Authorization": f"Bearer {key}"}, calls), None)


def run_beside(base: str, key: str, calls: list[dict], lines: list[dict]) -> dict:
    headers = {"Authorization": f"Bearer {key}"}
    batch_id = batch_started(base, headers, lines)
    before = batch_counts(base, headers, batch_id)
    seconds = calls_timed(base, headers, calls)
    after = batch_counts(base, headers, batch_id)
    requests.post(f"{base}/v1/batches/{batch_id}/cancel", headers=headers, timeout=30)
    ended = after["completed"] + after["failed"] - before["completed"] - before["failed"]
    return _summary("beside a batch", seconds, ended)


def _summary(name: str, seconds: list[float], lines_ended: int | None) -> dict:
    return {
        "way": name,
        "calls": len(seconds),
        "p50_s": round(percentile(seconds, 0.5), 3),
        "p95_s": round(percentile(seconds, 0.95), 3),
        "worst_s": round(max(seconds), 3),
        "batch_lines_ended_meanwhile": lines_ended,
        "seconds": [round(s, 3) for s in seconds],
    }


def markdown(report: dict) -> str:
    alone, beside = report["results"]
    rows = [
        f"# An interactive call beside a running batch ({report['date']})",
        "",
        f"Command: `{report['command']}`  ",
        f"Revision: {report['revision']}  ",
        f"Machine: {report['machine'].get('cpu')}, {report['machine'].get('cores')} cores "
        f"({report['machine'].get('simd')})  ",
        f"Load average before: {report['load_before'][0]:.2f}, after: "
        f"{report['load_after'][0]:.2f}  ",
        f"Calls: {alone['calls']} held-out /v1/completions, greedy, {report['max_tokens']} tokens "
        f"each, one after another; the batch: {report['batch_lines']} other held-out lines; one "
        "worker decoding 8 jobs at once.",
        "",
        "| way | p50 s | p95 s | worst s | batch lines ended meanwhile |",
        "|---|---|---|---|---|",
    ]
    for r in (alone, beside):
        ended = r["batch_lines_ended_meanwhile"]
        ended = "-" if ended is None else ended
        rows.append(f"| {r['way']} | {r['p50_s']} | {r['p95_s']} | {r['worst_s']} | {ended} |")
    ratios = ", ".join(
        f"{k[:-2]} {beside[k] / alone[k]:.2f}x" for k in ("p50_s", "p95_s", "worst_s")
    )
    rows += ["", f"Beside a batch / alone: {ratios}."]
    return "\n".join(rows) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=40)
    parser.add_argument("--batch-lines", type=int, default=400)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--threads", type=int, default=2, help="llama.cpp threads per worker")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = parser.parse_args()
    quiet = wait_for_quiet(threshold=0.5, max_wait=120)
    # The calls and the batch's lines are different held-out questions.
    bodies = requests_for(args.calls + args.batch_lines, args.max_tokens)
    calls, lines = bodies[-args.calls :], bodies[: args.batch_lines]
    before, results = load_average(), []
    for way in (run_alone, run_beside):
        results.append(on_fresh_stack(partial(way, calls=calls, lines=lines), args.threads))
        print(json.dumps({k: v for k, v in results[-1].items() if k != "seconds"}), flush=True)
    report = {
        **run_facts("batch_beside.py"),
        "calls": args.calls,
        "batch_lines": args.batch_lines,
        "max_tokens": args.max_tokens,
        "quiet": quiet,
        "load_before": before,
        "load_after": load_average(),
        "results": results,
    }
    text = markdown(report)
    print(text)
    save_results(args.out, "batch-beside", report, text)


if __name__ == "__main__":
    main()

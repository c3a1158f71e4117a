"""The Batch API against the same lines sent one request at a time through /v1, in one run.

    .venv/bin/python bench/batch.py [--lines 1000] [--max-tokens 32] [--ways batch,v1x1,v1x4]
        [--batch-max-queued 4] [--out bench/results]

The service as deployed (gunicorn, one Celery worker decoding PATHFINDER_WORKER_SEQUENCES=8 jobs
at once, PostgreSQL, Redis; bench/load.py's Stack) on a database of the run's own. The lines are
held out: review questions ("is this passage responsive to a request about X? quote the
clause") over the paragraphs of the three licences in bench/data/heldout, which no test or
tuning uses; greedy, `--max-tokens` each.

Measured one after another, each on a fresh stack (no way inherits another's prompt cache or
drafts):
  batch        one file through /v1/files and /v1/batches, from create to completed, with
               PATHFINDER_BATCH_MAX_QUEUED lines in flight (each of `--batch-max-queued`)
  /v1 x1       the same lines, one /v1/completions call after another (a plain client)
  /v1 x4       the same lines from 4 concurrent clients (PATHFINDER_KEY_MAX_WAITING: the most
               one key may have waiting), the best a client of /v1 alone can do
Reported: lines per minute and completion tokens per second for each, the batch's ratio to the
faster /v1 way, and the load average before and after.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
import tempfile
import threading
import time
from functools import partial
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from bench.load import MODEL, Stack  # noqa: E402
from bench.machine import load_average, run_facts, save_results, wait_for_quiet  # noqa: E402

HELDOUT = ROOT / "bench" / "data" / "heldout"
TOPICS = [
    "patent licences", "warranty disclaimers", "termination", "source code distribution",
    "trademarks", "liability limits", "sublicensing", "notices to users", "modification rights",
    "governing law",
]  # fmt: skip
CLIENTS = 4
BATCH_CAP = "PATHFINDER_BATCH_MAX_QUEUED"


def passages() -> list[str]:
    """The held-out licences' paragraphs of some substance, each cut to 600 characters."""
    found = []
    for path in sorted(HELDOUT.glob("*.txt")):
        for paragraph in path.read_text().split("\n\n"):
            text = " ".join(paragraph.split())
            if len(text) >= 200:
                found.append(text[:600])
    return found


def requests_for(count: int, max_tokens: int) -> list[dict]:
    texts = passages()
    lines = []
    for i in range(count):
        passage, topic = texts[i % len(texts)], TOPICS[(i // len(texts)) % len(TOPICS)]
        prompt = (
            f"Passage: {passage}\n\nIs this passage responsive to a request about {topic}? "
            "Answer yes or no, then quote the clause.\nAnswer:"
        )
        lines.append({"model": MODEL, "prompt": prompt, "max_tokens": max_tokens,
                      "temperature": 0, "seed": i})  # fmt: skip
    return lines


def batch_submit(base: str, headers: dict, bodies: list[dict]) -> dict:
    """A batch over `bodies` (/v1/completions lines l0, l1, ...) uploaded and created."""
    text = "".join(
        json.dumps({"custom_id": f"l{i}", "method": "POST", "url": "/v1/completions", "body": b})
        + "\n"
        for i, b in enumerate(bodies)
    )
    upload = requests.post(f"{base}/v1/files", headers=headers, timeout=120,
                           files={"file": ("bench.jsonl", io.BytesIO(text.encode()))},
                           data={"purpose": "batch"}).json()  # fmt: skip
    return requests.post(f"{base}/v1/batches", headers=headers, timeout=60,
                         json={"input_file_id": upload["id"], "endpoint": "/v1/completions",
                               "completion_window": "24h"}).json()  # fmt: skip


def on_fresh_stack(way, threads: int, env: dict | None = None) -> dict:
    """way(base, key) on a stack of its own (with `env` set for its processes): a worker keeps
    the prompts' KV states and drafts from the matter's earlier answers, which would favour
    whichever way ran later."""
    with tempfile.TemporaryDirectory() as logs:
        stack = Stack(Path(logs), threads=threads, workers=("w1",), sequences=8)
        stack.env.update(env or {})
        try:
            return way(stack.base, stack.start())
        finally:
            stack.stop()


def run_batch(base: str, key: str, *, bodies: list[dict]) -> dict:
    headers = {"Authorization": f"Bearer {key}"}
    started = time.monotonic()
    batch = batch_submit(base, headers, bodies)
    while batch["status"] not in ("completed", "failed", "expired", "cancelled"):
        time.sleep(0.5)
        batch = requests.get(f"{base}/v1/batches/{batch['id']}", headers=headers, timeout=30).json()
    seconds = time.monotonic() - started
    output = requests.get(f"{base}/v1/files/{batch['output_file_id']}/content", headers=headers,
                          timeout=120).text.splitlines()  # fmt: skip
    tokens = sum(
        json.loads(row)["response"]["body"]["usage"]["completion_tokens"] for row in output
    )
    counts = {
        **batch["request_counts"],
        # From create to in_progress: the lines checked and made into jobs.
        "validating_s": batch["in_progress_at"] - batch["created_at"],
    }
    return _rate("batch", len(bodies), len(output), tokens, seconds, counts)


def run_v1(base: str, key: str, *, bodies: list[dict], clients: int) -> dict:
    headers = {"Authorization": f"Bearer {key}"}
    queue = list(enumerate(bodies))
    lock = threading.Lock()
    answered, tokens, errors = [0], [0], []

    def client() -> None:
        session = requests.Session()
        while True:
            with lock:
                if not queue:
                    return
                _, body = queue.pop(0)
            response = session.post(f"{base}/v1/completions", json=body, headers=headers,
                                    timeout=600)  # fmt: skip
            with lock:
                if response.status_code == 200:
                    answered[0] += 1
                    tokens[0] += response.json()["usage"]["completion_tokens"]
                else:
                    errors.append(response.status_code)

    started = time.monotonic()
    threads = [threading.Thread(target=client) for _ in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    seconds = time.monotonic() - started
    counts = {"errors": len(errors), "statuses": sorted(set(errors))}
    return _rate(f"/v1 x{clients}", len(bodies), answered[0], tokens[0], seconds, counts)


def _rate(name: str, lines: int, answered: int, tokens: int, seconds: float, counts) -> dict:
    return {
        "system": name,
        "lines": lines,
        "answered": answered,
        "completion_tokens": tokens,
        "seconds": round(seconds, 1),
        "lines_per_minute": round(answered / seconds * 60, 1),
        "tokens_per_s": round(tokens / seconds, 1),
        "counts": counts,
    }


def markdown(report: dict) -> str:
    rows = report["results"]
    best_v1 = max(
        (r for r in rows if not r["system"].startswith("batch")),
        key=lambda r: r["lines_per_minute"],
    )
    lines = [
        f"# Batch API against /v1 one request at a time ({report['date']})",
        "",
        f"Command: `{report['command']}`  ",
        f"Revision: {report['revision']}  ",
        f"Machine: {report['machine'].get('cpu')}, {report['machine'].get('cores')} cores "
        f"({report['machine'].get('simd')})  ",
        f"Load average before: {report['load_before'][0]:.2f}, after: "
        f"{report['load_after'][0]:.2f}  ",
        f"Lines: {report['lines']} held-out review questions (bench/data/heldout), greedy, "
        f"{report['max_tokens']} tokens each; one worker decoding 8 jobs at once.",
        "",
        "| way | lines answered | seconds | lines/min | completion tokens/s | vs best /v1 |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        ratio = r["lines_per_minute"] / best_v1["lines_per_minute"]
        lines.append(
            f"| {r['system']} | {r['answered']}/{r['lines']} | {r['seconds']} | "
            f"{r['lines_per_minute']} | {r['tokens_per_s']} | {ratio:.2f}x |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lines", type=int, default=1000)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--threads", type=int, default=2, help="llama.cpp threads per worker")
    parser.add_argument("--ways", default="batch,v1x1,v1x4", help="which of the ways to run")
    parser.add_argument(
        "--batch-max-queued",
        default="4",
        help="PATHFINDER_BATCH_MAX_QUEUED for the batch way; a list runs it once for each",
    )
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = parser.parse_args()
    quiet = wait_for_quiet(threshold=0.5, max_wait=120)
    bodies = requests_for(args.lines, args.max_tokens)
    chosen = args.ways.split(",")
    ways = [
        (f"batch, {cap} in flight", partial(run_batch, bodies=bodies), {BATCH_CAP: cap})
        for cap in args.batch_max_queued.split(",")
        if "batch" in chosen
    ]
    ways += [
        (f"/v1 x{clients}", partial(run_v1, bodies=bodies, clients=clients), {})
        for clients in (1, CLIENTS)
        if f"v1x{clients}" in chosen
    ]
    before, results = load_average(), []
    for name, way, env in ways:
        results.append({**on_fresh_stack(way, args.threads, env), "system": name})
        print(json.dumps(results[-1]), flush=True)
    after = load_average()
    report = {
        **run_facts("batch.py"),
        "lines": args.lines,
        "max_tokens": args.max_tokens,
        "quiet": quiet,
        "load_before": before,
        "load_after": after,
        "results": results,
    }
    text = markdown(report)
    print(text)
    save_results(args.out, "batch", report, text)


if __name__ == "__main__":
    main()

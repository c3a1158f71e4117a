"""What a batch's bookkeeping costs per line as the batch grows: the database and queue work of
making its lines jobs, sending them and ending each (decoding.batches: batches_advance,
batches_feed, job_ended), with no decoding, at this revision and at a baseline revision,
side by side in one run.

    .venv/bin/python bench/batch_feed_cost.py [--sizes 100,1000,10000] [--baseline ee27989]
        [--out bench/results]

Each size is a fresh batch of held-out review questions (bench/batch.py's, over
bench/data/heldout) on the default model, in a database of its own on the local PostgreSQL
(`pathfinder_bench_batch_<revision>`), sent to a Redis queue of its own that is emptied after.
A line's end is what a worker does once it has decoded the line: the job marked succeeded, then
job_ended; the feed it runs sends the next line. Timed: validating (the lines made jobs)
per line, and a line's end, the mean over the first and over the last 200 lines of the batch
(so a cost that grows with the lines already run shows as last > first). The baseline is the
same script run in a git worktree of `--baseline`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

SAMPLE = 200


def measure(sizes: list[int], database: str) -> list[dict]:
    """This checkout's bookkeeping at each size (runs in whichever tree imports it)."""
    os.environ.setdefault("PATHFINDER_SECRET_KEY", "bench-only-not-a-production-secret-0123456789")
    os.environ.setdefault("PATHFINDER_LOG_LEVEL", "WARNING")
    os.environ["CELERY_BROKER_URL"] = "redis://127.0.0.1:6379/0"
    os.environ["PATHFINDER_TASK_QUEUE"] = f"bench-batch-{os.getpid()}"
    from bench.database import setup_database

    setup_database(f"postgres://postgres@127.0.0.1:5432/{database}", fresh=True)
    from celery import current_app
    from django.utils import timezone

    from bench.batch import requests_for
    from decoding import batches
    from decoding.models import Batch, GenerationJob, Matter

    # Its name before 2026-12-06 (a baseline may be older).
    line_ended = getattr(batches, "job_ended", None) or batches.batch_line_ended
    matter, key = Matter.objects.create(name="Bench v. Batch"), None  # no key: no web here
    results = []
    try:
        for size in sizes:
            text = "".join(
                json.dumps({"custom_id": f"l{i}", "method": "POST", "url": "/v1/completions",
                            "body": body}) + "\n"
                for i, body in enumerate(requests_for(size, 32))
            )  # fmt: skip
            stored = batches.file_upload(
                matter=matter,
                api_key=key,
                filename="b.jsonl",
                content=[text.encode()],
                purpose="batch",
            )
            batch = batches.batch_create(
                matter=matter,
                api_key=key,
                input_file_id=stored.pk,
                endpoint="/v1/completions",
                completion_window="24h",
            )
            started = time.perf_counter()
            while Batch.objects.get(pk=batch.pk).status == Batch.Status.VALIDATING:
                batches.batches_advance(budget_s=3600)
            validating_s = time.perf_counter() - started
            ends = []
            while True:
                sent = GenerationJob.objects.filter(
                    batch_line__batch=batch, status="queued", enqueued_at__isnull=False
                ).values_list("pk", flat=True)
                job_id = sent.order_by("batch_line__line").first()
                if job_id is None:
                    break
                GenerationJob.objects.filter(pk=job_id).update(
                    status="succeeded", finished_at=timezone.now()
                )
                started = time.perf_counter()
                line_ended(job_id)
                ends.append(time.perf_counter() - started)
            status = Batch.objects.get(pk=batch.pk).status
            results.append({
                "lines": size,
                "status": status,
                "lines_ended": len(ends),
                "validating_ms_per_line": round(validating_s / size * 1000, 3),
                "line_end_ms_first": round(statistics.mean(ends[:SAMPLE]) * 1000, 3),
                "line_end_ms_last": round(statistics.mean(ends[-SAMPLE:]) * 1000, 3),
                "line_end_ms_mean": round(statistics.mean(ends) * 1000, 3),
            })  # fmt: skip
            print(json.dumps(results[-1]), file=sys.stderr, flush=True)
    finally:
        with current_app.connection_for_write() as connection:
            connection.default_channel.queue_purge(os.environ["PATHFINDER_TASK_QUEUE"])
    return results


def baseline(revision: str, sizes: list[int]) -> list[dict]:
    """The same measurement in a worktree of `revision`, with this script copied in."""
    from bench.baseline import measure_at  # not in an older worktree, where this never runs

    return measure_at(
        revision,
        Path(__file__),
        ["--measure-only", "--sizes", ",".join(map(str, sizes)),
         "--database", _database(revision)],
    )  # fmt: skip


def _database(revision: str) -> str:
    return "pathfinder_bench_batch_" + "".join(c if c.isalnum() else "_" for c in revision)


def markdown(report: dict) -> str:
    rows = [
        f"# A batch's bookkeeping per line as the batch grows ({report['date']})",
        "",
        f"Command: `{report['command']}`  ",
        f"Revision: {report['revision']} against {report['baseline']}  ",
        f"Machine: {report['machine'].get('cpu')}, {report['machine'].get('cores')} cores  ",
        f"Load average before: {report['load_before'][0]:.2f}, after: "
        f"{report['load_after'][0]:.2f}  ",
        "No decoding: a line's end is the job marked succeeded, then job_ended (the feed "
        "sending the next line). Milliseconds.",
        "",
        "| lines | revision | ended | validating per line | line end, first 200 | "
        "line end, last 200 | line end, mean | mean vs baseline (lower: cheaper) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    base = {r["lines"]: r for r in report["baseline_results"]}
    for name, results in ((report["baseline"], report["baseline_results"]),
                          (report["revision"], report["results"])):  # fmt: skip
        for r in results:
            ratio = r["line_end_ms_mean"] / base[r["lines"]]["line_end_ms_mean"]
            rows.append(
                f"| {r['lines']} | {name} | {r['lines_ended']} ({r['status']}) | "
                f"{r['validating_ms_per_line']} | {r['line_end_ms_first']} | "
                f"{r['line_end_ms_last']} | {r['line_end_ms_mean']} | {ratio:.2f}x |"
            )
    return "\n".join(rows) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="100,1000,10000")
    parser.add_argument("--baseline", default="ee27989", help="the revision to compare with")
    parser.add_argument("--measure-only", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--database", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = parser.parse_args()
    sizes = [int(x) for x in args.sizes.split(",")]
    if args.measure_only:  # the baseline's worktree: the figures alone, as JSON
        print(json.dumps(measure(sizes, args.database)))
        return
    from bench.machine import git_revision, load_average, run_facts, save_results

    load_before = load_average()
    base = baseline(args.baseline, sizes)
    results = measure(sizes, _database(git_revision()))
    report = {
        **run_facts("batch_feed_cost.py"),
        "baseline": args.baseline,
        "load_before": load_before,
        "load_after": load_average(),
        "baseline_results": base,
        "results": results,
    }
    text = markdown(report)
    print(text)
    save_results(args.out, "batch-feed-cost", report, text)


if __name__ == "__main__":
    main()

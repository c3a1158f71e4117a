"""What closing a batch costs as it grows (issue 41, item 5): the output and error files written
and the batch ended (decoding.batches._close), at this revision and at a baseline revision, side
by side in one run.

    .venv/bin/python bench/batch_close.py [--lines 50000] [--baseline 5b03f93] [--out bench/results]

A batch of `--lines` completions lines on the stub model (real jobs, real trails, each line's
answer recorded), made and decoded once, in a git worktree of `--baseline` and a database of its
own (`pathfinder_bench_close_<baseline>`); the baseline closes it (timed), the batch is reopened
(in progress, no files), this revision's migrations run over the same rows, and this revision
closes it (timed). `--reuse` closes again a batch an earlier run decoded (the database is
migrated back to the baseline's schema first). Timed: the close alone (decoding.batches._close):
seconds, database queries (counted on the connection), the most Python memory it held
(tracemalloc, which slows both alike), and the queries and seconds while it held the batch row's
lock (from its SELECT ... FOR UPDATE to the commit).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
import time
import tracemalloc
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def prepare(lines: int) -> str:
    """A `lines`-line batch on the stub model, every line decoded (two processes); its id."""
    from django.db import connection

    from decoding import batches
    from decoding.models import Batch, GenerationJob, Matter

    matter = Matter.objects.create(name="Bench v. Close")
    text = "".join(
        json.dumps({"custom_id": f"doc-{n}", "method": "POST", "url": "/v1/completions",
                    "body": {"model": "stub", "prompt": [n % 31 + 1, 4, 9], "max_tokens": 8,
                             "temperature": 0}}) + "\n"
        for n in range(lines)
    ).encode()  # fmt: skip
    stored = batches.file_upload(
        matter=matter, api_key=None, filename="b.jsonl", purpose="batch", data=text
    )  # fmt: skip (the baseline's API)
    batch = batches.batch_create(matter=matter, api_key=None, input_file_id=stored.pk,
                                 endpoint="/v1/completions", completion_window="24h")  # fmt: skip
    while Batch.objects.get(pk=batch.pk).status == Batch.Status.VALIDATING:
        batches._expand(batch.pk, time.monotonic() + 3600)
    jobs = list(GenerationJob.objects.filter(batch_line__batch=batch).values_list("pk", flat=True))
    connection.close()  # each process opens its own
    with multiprocessing.get_context("fork").Pool(2) as pool:
        for done, _ in enumerate(pool.imap_unordered(_decode, jobs, chunksize=50), start=1):
            if done % 5000 == 0:
                print(f"{done} lines decoded", file=sys.stderr, flush=True)
    return batch.pk


def _decode(job_id) -> None:
    from decoding.worker.execution import job_run

    job_run(job_id=job_id)


def measure_close(batch_id: str) -> dict:
    """The close alone: seconds, queries, peak Python memory, queries under the batch's lock.
    Queries are counted by a wrapper on the connection (Django's own log keeps only 9,000)."""
    from django.db import connection

    from decoding import batches
    from decoding.models import Batch

    seen = {"queries": 0, "locked_at": None, "locked_queries": 0}

    def counting(execute, sql, params, many, context):
        seen["queries"] += 1
        if seen["locked_at"] is None and "FOR UPDATE" in sql and "decoding_batch" in sql:
            seen["locked_at"] = time.perf_counter()  # the batch row's lock, held to the commit
        if seen["locked_at"] is not None:
            seen["locked_queries"] += 1
        return execute(sql, params, many, context)

    tracemalloc.start()
    with connection.execute_wrapper(counting):
        started = time.perf_counter()
        assert batches._close(batch_id) == 1
        ended_at = time.perf_counter()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    locked_s = ended_at - seen["locked_at"] if seen["locked_at"] is not None else 0.0
    ended = Batch.objects.select_related("output_file").get(pk=batch_id)
    return {
        "status": ended.status,
        "output_bytes": ended.output_file.bytes if ended.output_file_id else 0,
        "close_s": round(ended_at - started, 3),
        "close_queries": seen["queries"],
        "close_peak_python_mib": round(peak / (1 << 20), 1),
        "queries_under_the_batch_lock": seen["locked_queries"],
        "seconds_under_the_batch_lock": round(locked_s, 3),
    }


def reopen(batch_id: str) -> None:
    """The batch as it was before its close: in progress, no files."""
    from decoding.models import Batch, BatchFile

    batch = Batch.objects.get(pk=batch_id)
    files = [batch.output_file_id, batch.error_file_id]
    Batch.objects.filter(pk=batch_id).update(
        status=Batch.Status.IN_PROGRESS, output_file=None, error_file=None, finalizing_at=None,
        completed_at=None,
    )  # fmt: skip
    BatchFile.objects.filter(pk__in=[f for f in files if f]).delete()


def setup(database: str, fresh: bool) -> None:
    os.environ.setdefault("PATHFINDER_SECRET_KEY", "bench-only-not-a-production-secret-0123456789")
    os.environ.setdefault("PATHFINDER_LOG_LEVEL", "WARNING")
    os.environ["CELERY_BROKER_URL"] = "memory://"
    os.environ["PATHFINDER_DEFAULT_MODEL"] = "stub"
    from bench.database import setup_database

    setup_database(f"postgres://postgres@127.0.0.1:5432/{database}", fresh=fresh)
    from decoding import batches

    batches.kick = lambda: None  # no broker here: nothing is sent


def baseline(revision: str, lines: int, database: str, reuse: bool) -> dict:
    """In a worktree of `revision`: the batch made and decoded (or, `reuse`, the one an earlier
    run left), closed (timed), and reopened for this revision's close over the same rows."""
    from bench.baseline import measure_at

    args = ["--measure-baseline", "--lines", str(lines), "--database", database]
    return measure_at(revision, Path(__file__), args + (["--reuse"] if reuse else []))


def back_to_the_baseline(database: str) -> None:
    """The batch an earlier run left, reopened, and the database migrated back to the baseline's
    schema (decoding 0020: the files' bytes in one column again)."""
    setup(database, fresh=False)
    from django.core.management import call_command
    from django.db import connection

    from decoding.models import Batch

    reopen(Batch.objects.get().pk)
    call_command("migrate", "decoding", "0020", verbosity=0)
    connection.close()


def _database(revision: str) -> str:
    return "pathfinder_bench_close_" + "".join(c if c.isalnum() else "_" for c in revision)


def markdown(report: dict) -> str:
    rows = [
        f"# Closing a batch of {report['lines']} lines ({report['date']})",
        "",
        f"Command: `{report['command']}`  ",
        f"Revision: {report['revision']} against {report['baseline']}  ",
        f"Machine: {report['machine'].get('cpu')}, {report['machine'].get('cores')} cores  ",
        f"Load average before: {report['load_before'][0]:.2f}, after: "
        f"{report['load_after'][0]:.2f}",
        "",
        "Every line a real stub-model job with its trail; the close alone timed (`_close`).",
        "",
        "| revision | close s | queries | peak Python MiB | queries under the batch lock | "
        "seconds under it | output bytes |",
        "|---|---|---|---|---|---|---|",
    ]
    for name in ("baseline_result", "result"):
        r = report[name]
        label = report["baseline"] if name == "baseline_result" else report["revision"]
        rows.append(
            f"| {label} | {r['close_s']} | {r['close_queries']} | {r['close_peak_python_mib']} "
            f"| {r['queries_under_the_batch_lock']} | {r['seconds_under_the_batch_lock']} "
            f"| {r['output_bytes']} |"
        )
    b, r = report["baseline_result"], report["result"]
    rows += [
        "",
        f"This revision over the baseline: close time {r['close_s'] / b['close_s']:.3f}x, "
        f"queries {r['close_queries'] / b['close_queries']:.4f}x, peak memory "
        f"{r['close_peak_python_mib'] / max(b['close_peak_python_mib'], 0.1):.3f}x.",
        "",
    ]
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--lines", type=int, default=50_000)
    parser.add_argument("--baseline", default="5b03f93")
    parser.add_argument("--database", default=None)
    parser.add_argument("--measure-baseline", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument(
        "--reuse", action="store_true", help="close again the batch an earlier run decoded"
    )
    parser.add_argument("--out", type=Path, default=ROOT / "bench/results")
    options = parser.parse_args()
    if options.measure_baseline:
        setup(options.database, fresh=not options.reuse)
        started = time.perf_counter()
        if options.reuse:
            from decoding.models import Batch

            batch_id = Batch.objects.get().pk
        else:
            batch_id = prepare(options.lines)
        decoding_s = time.perf_counter() - started
        result = {"batch_id": batch_id, "decoding_s": round(decoding_s, 1),
                  **measure_close(batch_id)}  # fmt: skip
        reopen(batch_id)
        print(json.dumps(result))
        return
    from bench.machine import load_average, run_facts, save_results

    report = {**run_facts("batch_close.py"), "lines": options.lines,
              "baseline": options.baseline, "load_before": load_average()}  # fmt: skip
    database = _database(options.baseline)
    if options.reuse:
        back_to_the_baseline(database)
    report["baseline_result"] = baseline(options.baseline, options.lines, database, options.reuse)
    if options.reuse:
        from django.core.management import call_command

        call_command("migrate", verbosity=0)  # this revision's migrations over the same rows
    else:
        setup(database, fresh=False)  # this revision's migrations over the same rows
    report["result"] = measure_close(report["baseline_result"]["batch_id"])
    report["load_after"] = load_average()
    text = markdown(report)
    save_results(options.out, "batch-close", report, text)
    print(text)


if __name__ == "__main__":
    main()

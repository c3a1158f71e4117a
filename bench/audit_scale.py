"""What audit work costs on a large store: a synthetic history (bench/history.py) of many sealed
trails, their job rows, ledger, tiles and custody events, then, timed on it:

    .venv/bin/python bench/audit_scale.py [--trails 100000] [--records-per-trail 10]
        [--custody-events 100000] [--reuse] [--out bench/results]

- `manage.py verify_chain --all` as an operator runs it (a process of its own, with its
  PATHFINDER_VERIFY_WORKERS processes): the first run, which walks every record, one with
  `--full`, and the next, incremental one (records/s of the history covered);
- a checkpoint over the whole log, and an inclusion proof read from stored tiles beside the
  proof computed from every leaf (what each proof cost before tiles);
- the reviewer's pages (trails list, a job's walk, the custody log), Verify and Export, through
  Django's whole stack in this process, each requested several times (median and worst).

The database is `pathfinder_bench_history` on the local PostgreSQL (`--reuse` keeps the history
built by an earlier run). Results: bench/results/audit-scale-<date>.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.database import setup_database  # noqa: E402
from bench.machine import load_average, run_facts, save_results  # noqa: E402

URL = "postgres://postgres@127.0.0.1:5432/pathfinder_bench_history"
PAGE_TARGET_MS = 200
VERIFY_TARGET = 100_000  # records per second


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trails", type=int, default=100_000)
    parser.add_argument("--records-per-trail", type=int, default=10)
    parser.add_argument("--custody-events", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--reuse", action="store_true", help="keep an earlier run's history")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = parser.parse_args()
    os.environ.setdefault("PATHFINDER_ALLOWED_HOSTS", "testserver")
    os.environ.setdefault("PATHFINDER_LOG_LEVEL", "WARNING")
    os.environ.setdefault("PATHFINDER_SECRET_KEY", "bench-only-not-a-production-secret-0123456789")
    os.environ.setdefault("PATHFINDER_CHECKPOINT_KEY_FILE", str(ROOT / "var" / "bench-signing.key"))
    os.environ.setdefault(
        "PATHFINDER_CHECKPOINT_PUBLISH_DIR", str(ROOT / "var" / "bench-published-checkpoints")
    )
    if not args.reuse:
        # A new history is a new log: checkpoints published for an earlier one would rightly
        # read as a rollback.
        shutil.rmtree(os.environ["PATHFINDER_CHECKPOINT_PUBLISH_DIR"], ignore_errors=True)
    report = run_facts("audit_scale.py")
    report["load_before"] = load_average()
    report["postgres"] = setup_database(URL, fresh=not args.reuse)

    from audit.keys import signing_key_create
    from bench.history import build_history

    signing_key_create()
    from audit.models import DecisionRecord

    if DecisionRecord.objects.exists():
        report["history"] = {
            "trails": _count_trails(),
            "records": DecisionRecord.objects.count(),
            "reused": True,
        }
    else:
        print(f"building {args.trails} trails ...", flush=True)
        report["history"] = build_history(
            trails=args.trails,
            records_per_trail=args.records_per_trail,
            custody_events=args.custody_events,
        )
    print(json.dumps(report["history"]), flush=True)
    report["checkpoint"] = _checkpoint()
    report["proofs"] = _proofs()
    report["verify_chain"] = [
        _verify_chain("first (no verified point yet: every record walked)"),
        _verify_chain("--full (every record walked)", "--full"),
        _verify_chain("next (incremental from the first's point)"),
    ]
    report["custody_walk"] = _custody_walk()
    report["pages"] = _pages(args.repeats)
    report["load_after"] = load_average()
    save_results(args.out, "audit-scale", report, render(report))
    print(render(report))


def _count_trails() -> int:
    from audit.models import Trail

    return Trail.objects.count()


def _timed(work) -> tuple[float, object]:
    started = time.perf_counter()
    result = work()
    return (time.perf_counter() - started) * 1000, result


def _checkpoint() -> dict:
    from audit.log import checkpoint_create
    from audit.models import LogTile

    ms, checkpoint = _timed(checkpoint_create)
    return {"ms": round(ms, 1), "tree_size": checkpoint.tree_size, "tiles": LogTile.objects.count()}


def _proofs() -> dict:
    """An inclusion proof from tiles, against the same proof from every leaf."""
    from audit.evidence import merkle
    from audit.log import inclusion_of
    from audit.models import LedgerEntry

    size = LedgerEntry.objects.count()
    entry = LedgerEntry.objects.get(seq=size // 3)
    tiles_ms = []
    for _ in range(5):
        ms, inclusion = _timed(lambda: inclusion_of(entry.trail_id))
        tiles_ms.append(ms)

    def from_leaves():
        payloads = LedgerEntry.objects.order_by("seq").values_list("payload", flat=True)
        leaves = [p.encode() for p in payloads.iterator(chunk_size=2000)][
            : inclusion.checkpoint.tree_size
        ]
        return merkle.inclusion_proof(entry.seq, leaves)

    leaves_ms, proof = _timed(from_leaves)
    assert proof == inclusion.proof
    return {
        "leaves": size,
        "from_tiles_ms": round(statistics.median(tiles_ms), 2),
        "from_every_leaf_ms": round(leaves_ms, 1),
        "speedup": round(leaves_ms / statistics.median(tiles_ms), 1),
    }


def _verify_chain(label: str, *flags: str) -> dict:
    from audit.models import VerificationRun

    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "manage.py", "verify_chain", "--all", "--json", *flags],
        cwd=ROOT,
        env={**os.environ, "DATABASE_URL": URL},
        capture_output=True,
        text=True,
    )
    seconds = time.perf_counter() - started
    result = json.loads(done.stdout)
    run = VerificationRun.objects.order_by("-id").first()
    covered = result.get("records_covered", result["records_checked"])
    return {
        "run": label,
        "exit": done.returncode,
        "ok": result["ok"],
        "seconds": round(seconds, 2),
        "in_db_s": round((run.finished_at - run.started_at).total_seconds(), 2),
        "records_checked": result["records_checked"],
        "records_covered": covered,
        "jobs_checked": result["jobs_checked"],
        "records_per_s": round(covered / seconds),
        "first_failure": (result["failures"] or [None])[0],
    }


def _custody_walk() -> dict:
    """Beat's walk of the whole custody chain (reviewers.verify_custody), which leaves the
    verified point the custody page then checks from."""
    from reviewers.custody_chain import custody_verify

    ms, (result, _) = _timed(lambda: custody_verify(from_start=True))
    return {"ms": round(ms, 1), "events": result.events_checked, "ok": result.ok}


def _pages(repeats: int) -> list[dict]:
    from django.contrib.auth import get_user_model
    from django.test import Client

    from decoding.models import GenerationJob

    client = Client()
    client.force_login(get_user_model().objects.get(username="history-reviewer"))
    job = GenerationJob.objects.order_by("id").first()  # any one: ids are random
    last = GenerationJob.objects.order_by("-created_at").first()
    pages = [
        ("trails list", "get", "/portal/"),
        ("trails list, page 50", "get", "/portal/?page=50"),
        ("trails list, search", "get", f"/portal/?q={str(last.id)[:8]}"),
        ("a job's walk", "get", f"/portal/jobs/{job.id}/"),
        ("custody log", "get", "/portal/custody/"),
        ("custody log, oldest page", "get", "/portal/custody/?before=60"),
        ("Verify", "post", f"/portal/jobs/{job.id}/verify"),
        ("Export", "post", f"/portal/jobs/{job.id}/export"),
    ]
    # The process's first request compiles templates and resolves URLs once: timed apart.
    cold_ms, _ = _timed(lambda: client.get("/portal/"))
    results = [
        {
            "page": "first request of the process (cold)",
            "url": "/portal/",
            "status": 200,
            "median_ms": round(cold_ms, 1),
            "worst_ms": round(cold_ms, 1),
        }
    ]
    for name, method, url in pages:
        times, status = [], None
        for _ in range(repeats):
            ms, response = _timed(lambda m=method, u=url: getattr(client, m)(u))
            times.append(ms)
            status = response.status_code
        results.append(
            {
                "page": name,
                "url": url,
                "status": status,
                "median_ms": round(statistics.median(times), 1),
                "worst_ms": round(max(times), 1),
            }
        )
    return results


def render(report: dict) -> str:
    history, checkpoint, proofs = report["history"], report["checkpoint"], report["proofs"]
    lines = [
        "# Audit work on a large store",
        "",
        f"Command: `{report['command']}` at {report['revision']}, {report['date']}.",
        f"Machine: {report['machine']}.",
        f"Load before {report['load_before']}, after {report['load_after']}.",
        f"PostgreSQL {report['postgres']['server_version']} (fsync {report['postgres']['fsync']}, "
        f"synchronous_commit {report['postgres']['synchronous_commit']}).",
        "",
        f"History: {history['trails']} sealed trails, {history['records']} records"
        + (
            f", {history.get('custody_events')} custody events, built in {history.get('build_s')} s"
            if "build_s" in history
            else " (reused)"
        )
        + ".",
        "",
        "## verify_chain --all",
        "",
        f"Target: at least {VERIFY_TARGET:,} records/s.",
        "",
        "| run | exit | seconds | records walked | records covered | job rows | records/s |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for run in report["verify_chain"]:
        lines.append(
            f"| {run['run']} | {run['exit']} | {run['seconds']} | {run['records_checked']:,} | "
            f"{run['records_covered']:,} | {run['jobs_checked']:,} | {run['records_per_s']:,} |"
        )
    lines += [
        "",
        "## The log",
        "",
        f"Checkpoint over {checkpoint['tree_size']:,} leaves: {checkpoint['ms']} ms "
        f"({checkpoint['tiles']} tiles stored).",
        f"Inclusion proof: {proofs['from_tiles_ms']} ms from stored tiles against "
        f"{proofs['from_every_leaf_ms']} ms from every leaf ({proofs['speedup']}x).",
        "",
        "## Reviewer pages",
        "",
        f"Beat's walk of the whole custody chain first ({report['custody_walk']['events']:,} "
        f"events, {report['custody_walk']['ms']} ms), as every PATHFINDER_VERIFY_INTERVAL_S; "
        "the custody page then checks only what was chained since.",
        "",
        f"Target: under {PAGE_TARGET_MS} ms. Through Django's whole stack in one process "
        f"(no network), {report['pages'] and len(report['pages'])} pages.",
        "",
        "| page | status | median ms | worst ms | under target |",
        "|---|---:|---:|---:|---|",
    ]
    for page in report["pages"]:
        ok = "yes" if page["worst_ms"] < PAGE_TARGET_MS else "no"
        if "cold" in page["page"]:
            ok = "(not a page)"
        lines.append(
            f"| {page['page']} | {page['status']} | {page['median_ms']} | {page['worst_ms']} "
            f"| {ok} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()

"""What following waiting jobs costs a web process (issue 45 item 3): N callers, each waiting on
its own job as a /v1 call does (decoding.web.relay.wait), in one process, for a few seconds with
the jobs idle and a few with a worker's notice for every job every 50 ms (a streaming step's
pace). Counted: the SQL queries the process ran, its TCP connections to Redis, the Redis
subscriptions it held (channels and patterns), and how long a job's notice took to reach its
waiter's next read (with notices). Both ways a web process follows: with notices
(PATHFINDER_EVENTS_URL, Redis pub/sub) and without (the embedded default's polling).

    .venv/bin/python bench/followers.py --baseline HEAD~1   # this revision and HEAD~1, side by side

Measures this revision; with --baseline, the same script at that revision too, from a git
worktree (bench/baseline.py). Needs PostgreSQL and Redis (DATABASE_URL, REDIS_URL below).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

DATABASE_URL = os.environ.get(
    "BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/pathfinder_bench_followers"
)
REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/13")
NOTICE_EVERY_S = 0.05


class Queries:
    """Every SQL statement any thread of this process runs, counted."""

    def __init__(self) -> None:
        from django.db.backends import utils

        self.count = 0
        self._lock = threading.Lock()
        original = utils.CursorWrapper.execute

        def counted(cursor, sql, params=None):
            with self._lock:
                self.count += 1
            return original(cursor, sql, params)

        utils.CursorWrapper.execute = counted


def redis_connections() -> int:
    """This process's established TCP connections to the Redis port (/proc: Linux)."""
    port = int(REDIS_URL.split(":")[2].split("/")[0])
    ours = set()
    for fd in Path("/proc/self/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            ours.add(target[8:-1])
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            remote_port = int(fields[2].rsplit(":", 1)[1], 16)
            if remote_port == port and fields[3] == "01" and fields[9] in ours:  # 01: established
                count += 1
    return count


def subscriptions(job_ids) -> dict:
    import redis

    client = redis.Redis.from_url(REDIS_URL)
    channels = client.pubsub_numsub(*[f"pathfinder:job:{job_id}" for job_id in job_ids])
    return {
        "channels": sum(count for _, count in channels),
        "patterns": client.pubsub_numpat(),
    }


def make_jobs(n: int) -> list:
    from decoding.models import Matter
    from decoding.services import job_submit

    matter, _ = Matter.objects.get_or_create(name="bench followers")
    return [
        job_submit(
            matter=matter, api_key=None, model="stub", prompt_token_ids=[1, 2, 3], enqueue=False
        )[0].id
        for _ in range(n)
    ]


def phase(job_ids, seconds: float, notices: bool, queries: Queries) -> dict:
    """Every job waited on by its own thread for `seconds`; with `notices`, a notice for every
    job every NOTICE_EVERY_S meanwhile. The waits see the jobs as queued throughout."""
    from django.db import connection

    from decoding import events
    from decoding.web import relay

    reads: dict = {job_id: [] for job_id in job_ids}
    original_get = relay.GenerationJob.objects.select_related

    def noting(*fields):  # a waiter's read of its job row, timed
        return _Timed(original_get(*fields), reads)

    relay.GenerationJob.objects.select_related = noting
    published: dict = {job_id: [] for job_id in job_ids}
    stop = threading.Event()

    def wait(job_id):
        try:
            relay.wait(job_id, timeout=seconds)
        except relay.JobTimeout:
            pass
        finally:
            connection.close()

    def worker():
        while not stop.wait(NOTICE_EVERY_S):
            for job_id in job_ids:
                published[job_id].append(time.monotonic())
                events.publish(job_id)

    threads = [threading.Thread(target=wait, args=(job_id,)) for job_id in job_ids]
    before = queries.count
    for thread in threads:
        thread.start()
    time.sleep(min(1.0, seconds / 2))
    held = {"redis_connections": redis_connections(), **subscriptions(job_ids)}
    publisher = threading.Thread(target=worker)
    if notices:
        publisher.start()
    for thread in threads:
        thread.join()
    stop.set()
    if notices:
        publisher.join()
    relay.GenerationJob.objects.select_related = original_get
    lags = []
    for job_id in job_ids:
        times = reads[job_id]
        for sent in published[job_id][:-2]:
            later = [t for t in times if t >= sent]
            if later:
                lags.append(later[0] - sent)
    return {
        **held,
        "queries_per_s": round((queries.count - before) / seconds, 1),
        "reads_per_s": round(sum(len(t) for t in reads.values()) / seconds, 1),
        "notice_to_read_ms_p50": round(1000 * statistics.median(lags), 1) if lags else None,
        "notice_to_read_ms_max": round(1000 * max(lags), 1) if lags else None,
    }


class _Timed:
    """A queryset whose get() notes when the job row was read."""

    def __init__(self, queryset, reads):
        self._queryset, self._reads = queryset, reads

    def get(self, pk):
        row = self._queryset.get(pk=pk)
        self._reads.setdefault(pk, []).append(time.monotonic())
        return row


def measure(waiters: int, seconds: float) -> dict:
    from bench.database import setup_database

    os.environ["PATHFINDER_EVENTS_URL"] = REDIS_URL
    setup_database(DATABASE_URL, fresh=True)
    from django.conf import settings

    queries = Queries()
    job_ids = make_jobs(waiters)
    result = {}
    for mode, url in (("notices", REDIS_URL), ("polling", "")):
        settings.PATHFINDER_EVENTS_URL = url
        result[mode] = {
            "idle": phase(job_ids, seconds, False, queries),
            "moving": phase(job_ids, seconds, bool(url), queries),
        }
    return result


def report(facts: dict, figures: dict, waiters: int, seconds: float) -> str:
    machine = facts["machine"]
    lines = [
        f"# Following waiting jobs: {waiters} callers in one web process, {seconds:g} s a phase",
        "",
        f"{facts['date']}, `{facts['command']}` at {facts['revision']}; {machine['cpu']} "
        f"({machine['cores']} cores, {machine['simd']}), load {facts['load']} before.",
        "",
        "| revision | mode | phase | Redis connections | channel subscriptions | pattern "
        "subscriptions | queries/s | job-row reads/s | notice to read p50 / max (ms) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for revision, result in figures.items():
        for mode, phases in result.items():
            for name, f in phases.items():
                lag = (
                    f"{f['notice_to_read_ms_p50']} / {f['notice_to_read_ms_max']}"
                    if f["notice_to_read_ms_p50"] is not None
                    else "–"
                )
                lines.append(
                    f"| {revision} | {mode} | {name} | {f['redis_connections']} | "
                    f"{f['channels']} | {f['patterns']} | {f['queries_per_s']} | "
                    f"{f['reads_per_s']} | {lag} |"
                )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--waiters", type=int, default=12)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--baseline", help="a git revision measured the same way, side by side")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON only")
    args = parser.parse_args()
    if args.json:
        print(json.dumps(measure(args.waiters, args.seconds)))
        return
    from bench.machine import load_average, run_facts, save_results

    facts = {**run_facts("followers.py"), "load": " ".join(f"{x:.2f}" for x in load_average())}
    figures = {}
    if args.baseline:
        from bench.baseline import measure_at

        figures[args.baseline] = measure_at(
            args.baseline,
            Path(__file__),
            ["--json", "--waiters", str(args.waiters), "--seconds", str(args.seconds)],
        )
    figures["this revision"] = json.loads(_run_here(args))
    text = report(facts, figures, args.waiters, args.seconds)
    print(text)
    results = Path(__file__).parent / "results"
    save_results(results, "followers", {**facts, "figures": figures}, text)


def _run_here(args) -> str:
    import subprocess

    done = subprocess.run(
        [sys.executable, __file__, "--json", "--waiters", str(args.waiters),
         "--seconds", str(args.seconds)],
        check=True, stdout=subprocess.PIPE,
    )  # fmt: skip
    return done.stdout.decode().strip().splitlines()[-1]


if __name__ == "__main__":
    main()

"""Load test: the deployed service (gunicorn, two Celery workers, PostgreSQL, Redis) under a
closed loop of concurrent clients, bounded in time, on loopback.

    .venv/bin/python bench/load.py [--clients 4] [--seconds 60] [--out bench/results]

Each client submits a job (POST /api/v1/generations), polls it to the end, and starts the next.
Reported: throughput, p50/p99 latency of the submit and of completion (submit to finished),
errors, lost jobs (submitted but not finished when the run drains), and verify_chain --all over
every trail afterwards. The baseline, measured in the same run on the same machine: the same
requests decoded back to back by the engine alone in this process (the worker's models, no web,
queue or audit), so the ratio shows what the service around the engine costs or gains.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import psycopg
import requests

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

MODEL = "smollm2-135m-instruct"
PROMPTS = [
    "Quote the first sentence exactly: The lessee shall keep the premises in good repair.",
    "Summarise in one line: the parties agree to arbitrate any dispute in London.",
    "List three duties of a trustee.",
    "Write two sentences about the sea.",
]
FINISHED = {"succeeded", "failed", "cancelled"}
# The detailed /readyz (worker count) wants the metrics token.
OPS_TOKEN = secrets.token_urlsafe(16)
OPS_HEADERS = {"Authorization": f"Bearer {OPS_TOKEN}"}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


class Stack:
    """gunicorn and two workers on a database and a Celery queue of the run's own."""

    def __init__(
        self,
        log_dir: Path,
        threads: int,
        workers: tuple[str, ...] = ("w1", "w2"),
        sequences: int | None = None,
    ):
        """Workers decoding one job at a time each (--concurrency 1), or, given `sequences`,
        batching workers started as the README says with PATHFINDER_WORKER_SEQUENCES set."""
        suffix = secrets.token_hex(4)
        self.database = f"pathfinder_load_{suffix}"
        admin = os.environ.get(
            "LOAD_ADMIN_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres"
        )
        self.admin_url = admin
        self.url = admin.rsplit("/", 1)[0] + f"/{self.database}"
        with psycopg.connect(admin, autocommit=True) as db:
            db.execute(f'CREATE DATABASE "{self.database}"')
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.env = {
            **os.environ,
            "DATABASE_URL": self.url,
            "CELERY_BROKER_URL": os.environ.get("LOAD_BROKER_URL", "redis://127.0.0.1:6379/0"),
            "CACHE_URL": os.environ.get("LOAD_CACHE_URL", "redis://127.0.0.1:6379/1"),
            "PATHFINDER_TASK_QUEUE": f"pathfinder-load-{suffix}",
            "PATHFINDER_LLAMA_THREADS": str(threads),
            "PATHFINDER_RATE_LIMIT": "1000000/minute",
            "PATHFINDER_LOG_LEVEL": "WARNING",
            "PATHFINDER_SECRET_KEY": secrets.token_urlsafe(50),
            "PATHFINDER_METRICS_TOKEN": OPS_TOKEN,
        }
        if sequences is not None:
            self.env["PATHFINDER_WORKER_SEQUENCES"] = str(sequences)
        self.workers = workers
        self.worker_flags = [] if sequences is not None else ["--concurrency", "1"]
        self.log_dir = log_dir
        self.processes: list[subprocess.Popen] = []

    def manage(self, *args: str) -> str:
        done = subprocess.run(
            [sys.executable, "manage.py", *args], cwd=ROOT, env=self.env,
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        return done.stdout

    def start(self) -> str:
        self.manage("migrate", "--noinput")
        key = self.manage("create_api_key", "--matter", "load", "bench").strip().splitlines()[-1]
        self._spawn("gunicorn", [sys.executable, "-m", "gunicorn",
                                 "pathfinder_site.wsgi:application", "--bind",
                                 f"127.0.0.1:{self.port}", "--workers", "2"])  # fmt: skip
        for name in self.workers:
            self._spawn(name, [sys.executable, "-m", "celery", "-A", "pathfinder_site", "worker",
                               *self.worker_flags, "-n", f"{name}-load@%h"])  # fmt: skip
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                ready = requests.get(f"{self.base}/readyz", headers=OPS_HEADERS, timeout=5).json()
                if ready["ready"] and ready["checks"]["workers"]["count"] >= len(self.workers):
                    return key
            except (requests.RequestException, ValueError):
                pass
            time.sleep(0.5)
        raise RuntimeError(f"the stack did not become ready; logs in {self.log_dir}")

    def _spawn(self, name: str, argv: list[str]) -> None:
        log = open(self.log_dir / f"{name}.log", "wb")  # noqa: SIM115 - the child keeps it
        self.processes.append(
            subprocess.Popen(argv, cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                             start_new_session=True)
        )  # fmt: skip

    def stop(self) -> None:
        for process in self.processes:
            os.killpg(process.pid, signal.SIGTERM)
        for process in self.processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
        with psycopg.connect(self.admin_url, autocommit=True) as db:
            db.execute(f'DROP DATABASE IF EXISTS "{self.database}" WITH (FORCE)')


def wait_finished(
    session, base: str, headers: dict, job_id: str, timeout: float = 600, every: float = 0.02
) -> dict:
    """Poll a job every `every` seconds until it has finished; its last state."""
    deadline = time.monotonic() + timeout
    while True:
        job = session.get(f"{base}/api/v1/generations/{job_id}", headers=headers,
                          timeout=30).json()  # fmt: skip
        if job["status"] in FINISHED or time.monotonic() > deadline:
            return job
        time.sleep(every)


def run_clients(base: str, key: str, clients: int, seconds: float, max_tokens: int) -> dict:
    """The closed loop; returns per-request samples."""
    headers = {"Authorization": f"Bearer {key}"}
    deadline = time.monotonic() + seconds
    lock = threading.Lock()
    submits: list[float] = []
    completions: list[float] = []
    errors: list[str] = []
    submitted: list[str] = []

    def client(index: int) -> None:
        session = requests.Session()
        n = 0
        while time.monotonic() < deadline:
            body = {"model": MODEL, "prompt": PROMPTS[(index + n) % len(PROMPTS)],
                    "max_tokens": max_tokens, "temperature": 0, "seed": n}  # fmt: skip
            n += 1
            started = time.perf_counter()
            try:
                response = session.post(f"{base}/api/v1/generations", json=body, headers=headers,
                                        timeout=30)  # fmt: skip
            except requests.RequestException as exc:
                with lock:
                    errors.append(f"submit: {exc}")
                continue
            submitted_at = time.perf_counter()
            if response.status_code != 202:
                with lock:
                    errors.append(f"submit {response.status_code}: {response.text[:200]}")
                continue
            job_id = response.json()["id"]
            with lock:
                submits.append(submitted_at - started)
                submitted.append(job_id)
            job = wait_finished(session, base, headers, job_id)
            with lock:
                completions.append(time.perf_counter() - started)
                if job["status"] != "succeeded":
                    errors.append(f"job {job_id} {job['status']}: {job.get('error')}")

    started = time.perf_counter()
    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return {
        "elapsed_s": time.perf_counter() - started,
        "submit_s": submits,
        "completion_s": completions,
        "errors": errors,
        "submitted": submitted,
    }


def baseline(max_tokens: int, count: int, threads: int) -> dict:
    """The same requests decoded by the engine alone, back to back, in this process."""
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "pathfinder_site.settings")
    django.setup()
    from decoding.engine import (
        AdaptiveSchedule,
        AuditSink,
        GenerationParams,
        GenerationRequest,
        PromptLookupDrafter,
        SpeculativeDecoder,
        measure_verify_cost,
    )
    from decoding.engine.providers.llamacpp import LlamaCppProvider
    from decoding.engine.weights import default_gguf_path

    class Discard(AuditSink):
        def record(self, record) -> None:
            pass

    target = LlamaCppProvider(default_gguf_path(), name=MODEL, n_threads=threads)
    tokenizer = target.tokenizer
    # As the worker measures it when the model loads (decoding/worker/runtime.py).
    curve = measure_verify_cost(
        target, tokenizer.encode("The verify cost is measured once, when the model loads.")
    )
    started = time.perf_counter()
    tokens = 0
    for n in range(count):
        prompt = tokenizer.encode(PROMPTS[n % len(PROMPTS)])
        params = GenerationParams(max_tokens=max_tokens, temperature=0, seed=n, draft_length=8,
                                  eos_token_id=tokenizer.eos_token_id)  # fmt: skip
        decoder = SpeculativeDecoder(PromptLookupDrafter(target.vocab_size, min_ngram=3),
                                     target, Discard(), tokenizer=tokenizer)  # fmt: skip
        result = decoder.generate(
            GenerationRequest(str(n), tuple(prompt), params),
            schedule=AdaptiveSchedule(8, verify_cost=curve),
        )
        tokens += len(result.output_token_ids)
    elapsed = time.perf_counter() - started
    return {"jobs": count, "elapsed_s": elapsed, "jobs_per_s": count / elapsed, "tokens": tokens}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--threads", type=int, default=1, help="llama.cpp threads per worker")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = parser.parse_args()

    log_dir = ROOT / "bench" / ".cache" / "load-logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    stack = Stack(log_dir, args.threads)
    try:
        key = stack.start()
        print(f"stack ready at {stack.base}; warming both workers' models")
        run_clients(stack.base, key, 2, 0.1, 4)  # one short job per worker: models load
        print(f"{args.clients} clients for {args.seconds:g} s")
        load = run_clients(stack.base, key, args.clients, args.seconds, args.max_tokens)
        time.sleep(2)  # let anything still in flight land
        with psycopg.connect(stack.url) as db:
            statuses = dict(
                db.execute(
                    "SELECT status, count(*) FROM decoding_generationjob GROUP BY status"
                ).fetchall()
            )
            found = {row[0] for row in db.execute("SELECT id::text FROM decoding_generationjob")}
        lost = [job for job in load["submitted"] if job not in found]
        unfinished = sum(n for s, n in statuses.items() if s not in FINISHED)
        verified = subprocess.run(
            [sys.executable, "manage.py", "verify_chain", "--all", "--json"], cwd=ROOT,
            env=stack.env, capture_output=True, text=True,
        )  # fmt: skip
        verify = json.loads(verified.stdout)
    finally:
        stack.stop()
    print("baseline: the engine alone, same requests, back to back")
    base = baseline(args.max_tokens, max(8, len(load["completion_s"]) // 2), args.threads)

    jobs = len(load["completion_s"])
    throughput = jobs / load["elapsed_s"]
    result = {
        "date": dt.date.today().isoformat(),
        "command": "python bench/load.py " + " ".join(sys.argv[1:]),
        "machine": {
            "cpu": _cpu(),
            "cores": os.cpu_count(),
            "python": platform.python_version(),
            "load_average_at_end": os.getloadavg(),
        },
        "settings": vars(args) | {"out": str(args.out)},
        "service": {
            "jobs_finished": jobs,
            "jobs_per_s": throughput,
            "submit_p50_ms": 1000 * percentile(load["submit_s"], 0.5),
            "submit_p99_ms": 1000 * percentile(load["submit_s"], 0.99),
            "completion_p50_ms": 1000 * percentile(load["completion_s"], 0.5),
            "completion_p99_ms": 1000 * percentile(load["completion_s"], 0.99),
            "errors": len(load["errors"]),
            "error_samples": load["errors"][:10],
            "lost_jobs": len(lost),
            "unfinished_jobs": unfinished,
            "statuses": statuses,
            "verify_chain_ok": verify["ok"],
            "trails_verified": verify["trails_checked"],
            "records_verified": verify["records_checked"],
        },
        "baseline_engine_alone": base,
        "ratio_service_to_engine_jobs_per_s": throughput / base["jobs_per_s"],
    }
    args.out.mkdir(parents=True, exist_ok=True)
    stem = args.out / f"load-{result['date']}"
    stem.with_suffix(".json").write_text(json.dumps(result, indent=2) + "\n")
    stem.with_suffix(".md").write_text(_markdown(result))
    print(stem.with_suffix(".md").read_text())


def _cpu() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor()


def _markdown(r: dict) -> str:
    s, b = r["service"], r["baseline_engine_alone"]
    completion = f"{s['completion_p50_ms']:.0f} / {s['completion_p99_ms']:.0f} ms"
    verified = "intact" if s["verify_chain_ok"] else "BROKEN"
    verified += f" ({s['trails_verified']} trails, {s['records_verified']} records)"
    return f"""# Load test, {r["date"]}

Command: `{r["command"]}` (from the repository root; PostgreSQL and Redis on loopback).
Machine: {r["machine"]["cpu"]}, {r["machine"]["cores"]} cores, Python {r["machine"]["python"]}.
Load average at the end: {", ".join(f"{x:.2f}" for x in r["machine"]["load_average_at_end"])}.

Stack: gunicorn (2 processes, threaded) and two Celery workers (concurrency 1, llama.cpp
threads {r["settings"]["threads"]} each) on PostgreSQL and Redis; {r["settings"]["clients"]}
closed-loop clients for {r["settings"]["seconds"]:g} s, each submitting a job of
{r["settings"]["max_tokens"]} tokens on `{MODEL}` (greedy) and polling it to the end.

| measure | value |
|---|---|
| jobs finished | {s["jobs_finished"]} |
| throughput | {s["jobs_per_s"]:.2f} jobs/s |
| submit latency p50 / p99 | {s["submit_p50_ms"]:.1f} / {s["submit_p99_ms"]:.1f} ms |
| completion latency p50 / p99 (submit → finished, seen by polling) | {completion} |
| errors | {s["errors"]} |
| lost jobs (submitted, not in the database) | {s["lost_jobs"]} |
| jobs not finished after the run | {s["unfinished_jobs"]} |
| `verify_chain --all` afterwards | {verified} |

Baseline in the same run: the engine alone in one process (the same prompts and parameters,
prompt lookup, adaptive draft length, no web, queue or audit), back to back:
{b["jobs"]} jobs in {b["elapsed_s"]:.1f} s = {b["jobs_per_s"]:.2f} jobs/s.

**Service ÷ engine alone: {r["ratio_service_to_engine_jobs_per_s"]:.2f}×** jobs/s. The service
runs two workers (one llama.cpp thread each) where the baseline runs one process with the same
thread count; the service also carries HTTP, the queue, the audit trail in PostgreSQL and the
clients' polling. Both workers had their models loaded before the timed window.
"""


if __name__ == "__main__":
    main()

"""A chaos soak: streamed and non-streamed clients of two matters against the deployed stack while
its workers are killed at random and PostgreSQL and Redis are each restarted once.

    .venv/bin/python bench/chaos.py [--seconds 180] [--clients 4] [--out bench/results]

The stack is the fault suite's (tests/faults/stack.py): gunicorn, two Celery workers and beat on
a PostgreSQL cluster and a Redis server of its own, the application as a least-privilege role,
the real default model. Each client sends `POST /v1/completions` in a loop, every other one
streamed, alternating the two matters' keys. Meanwhile a worker is SIGKILLed (and started again)
every 20-40 s, PostgreSQL is restarted at a third of the run and Redis (which keeps nothing, so
its queued messages are lost) at two thirds. Then the clients stop and the jobs drain.

Checked, and written to bench/results/chaos-<date>.{json,md}: no job lost (every job a client
was told of, and every job in the database, finished); no 5xx outside the outage windows (each
restart, and the recovery sweep's next turns after it), and only 503 or 504 inside them; every
streamed text equal to the job's `output_text`, or ended by an error event; `verify_chain --all`
intact. The run exits 1 when any of these fails.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import signal
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import psycopg
import requests

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("PATHFINDER_SECRET_KEY", "chaos-only-not-a-production-secret-0123456789")

from bench.machine import load_average, run_facts, save_results  # noqa: E402
from tests.faults.servers import PrivatePostgres  # noqa: E402
from tests.faults.stack import APP_ROLE, FaultStack, running_fault_stack  # noqa: E402
from tests.system.helpers import FINISHED, auth  # noqa: E402

MODEL = "smollm2-135m-instruct"
PROMPTS = [
    "Summarise the duties of a lighthouse keeper in two sentences.",
    "List three things a tenant must do under a repair covenant.",
    "Explain what an arbitration clause is to a new client.",
]
MATTERS = ("Chaos v. Order", "Second v. Matter")
# After an outage ends, a job whose message or lease it cost is back within the lease (4 s)
# and a sweep (every 2 s); requests waiting meanwhile may still see it.
RECOVERY_GRACE_S = 15


@dataclass
class Call:
    client: int
    matter: str
    stream: bool
    started: float
    ended: float = 0.0
    status: int = 0
    job: str = ""
    text: str = ""
    done: bool = False  # the stream's closing [DONE] arrived
    errors: list[str] = field(default_factory=list)
    exception: str = ""


@dataclass
class Outage:
    what: str
    started: float
    ended: float


def client_loop(stack: FaultStack, number: int, stop: threading.Event, calls: list, seed: int):
    rng = random.Random(seed)
    n = 0
    while not stop.is_set():
        matter = MATTERS[(number + n) % 2]
        stream = (number + n) % 2 == 0
        body = {
            "model": MODEL,
            "prompt": rng.choice(PROMPTS),
            "max_tokens": rng.randint(24, 64),
            "temperature": 0.7,
            "seed": rng.randrange(2**31),
            "stream": stream,
        }
        call = Call(number, matter, stream, time.monotonic())
        try:
            response = requests.post(
                stack.url("/v1/completions"),
                json=body,
                headers=auth(stack.keys[matter]),
                stream=stream,
                timeout=180,
            )
            call.status = response.status_code
            call.job = response.headers.get("X-Pathfinder-Job", "")
            if stream and response.status_code == 200:
                for line in response.iter_lines():
                    if line == b"data: [DONE]":
                        call.done = True
                        continue
                    if not line.startswith(b"data: "):
                        continue
                    event = json.loads(line[len(b"data: ") :])
                    if "error" in event:
                        call.errors.append(event["error"].get("code") or "error")
                    else:
                        call.text += event["choices"][0]["text"] or ""
        except requests.RequestException as exc:
            call.exception = type(exc).__name__
        call.ended = time.monotonic()
        calls.append(call)
        n += 1
        if call.status in (429, 503) or call.exception:
            # As a well-behaved client: wait as told (at most 2 s) before trying again.
            wait = response.headers.get("Retry-After", "1") if call.status else "1"
            time.sleep(min(2.0, float(wait) if wait.isdigit() else 1.0))


def chaos_loop(stack: FaultStack, seconds: float, stop: threading.Event, outages: list, log: list):
    """Kill a worker every 20-40 s; restart PostgreSQL at 1/3 and Redis at 2/3 of the run."""
    rng = random.Random(7)
    started = time.monotonic()
    pg_done = redis_done = False
    next_kill = started + rng.uniform(20, 40)
    while not stop.is_set():
        now = time.monotonic()
        if not pg_done and now - started > seconds / 3:
            t0 = time.monotonic()
            stack.pg.restart()
            outages.append(Outage("postgresql restart", t0, time.monotonic()))
            pg_done = True
        elif not redis_done and now - started > 2 * seconds / 3:
            t0 = time.monotonic()
            stack.redis.stop()
            time.sleep(2)
            stack.redis.start()
            outages.append(Outage("redis restart", t0, time.monotonic()))
            redis_done = True
        elif now >= next_kill:
            name = _busy_worker(stack) or rng.choice(["w1", "w2"])
            process = stack.processes[name]
            os.killpg(process.popen.pid, signal.SIGKILL)
            process.popen.wait(timeout=10)
            log.append({"at": round(now - started, 1), "killed": name})
            time.sleep(rng.uniform(1, 4))
            stack.start_worker(name)
            next_kill = time.monotonic() + rng.uniform(20, 40)
        time.sleep(0.2)


def _busy_worker(stack: FaultStack) -> str | None:
    """The name of a worker that is decoding a job now (killed mid-decode), if any."""
    with psycopg.connect(stack.database_url, autocommit=True) as db:
        running = db.execute(
            "SELECT worker FROM decoding_generationjob WHERE status = 'running' AND worker <> ''"
        ).fetchall()
    for (worker,) in running:
        with contextlib.suppress(ProcessLookupError, ValueError):
            group = os.getpgid(int(worker.rsplit(":", 1)[1]))
            for name in ("w1", "w2"):
                if stack.processes[name].popen.pid == group:
                    return name
    return None


def drain(stack: FaultStack, timeout: float = 300) -> dict[str, dict]:
    deadline = time.monotonic() + timeout
    jobs: dict[str, dict] = {}
    while time.monotonic() < deadline:
        with psycopg.connect(stack.database_url, autocommit=True) as db:
            found = db.execute(
                "SELECT id::text, status, failure, output_text, stream FROM decoding_generationjob"
            ).fetchall()
        jobs = {
            job_id: {"status": s, "failure": f, "output_text": o, "stream": st}
            for job_id, s, f, o, st in found
        }
        if all(job["status"] in FINISHED for job in jobs.values()):
            break
        time.sleep(1)
    return jobs


def in_outage(call: Call, outages: list[Outage]) -> bool:
    return any(
        call.started <= o.ended + RECOVERY_GRACE_S and call.ended >= o.started for o in outages
    )


def analyse(calls: list[Call], jobs: dict[str, dict], outages: list[Outage]) -> dict:
    told = {call.job for call in calls if call.job}
    lost = sorted(told - jobs.keys())
    unfinished = sorted(j for j, job in jobs.items() if job["status"] not in FINISHED)
    outside_5xx = [asdict(c) for c in calls if c.status >= 500 and not in_outage(c, outages)]
    inside_bad = [
        asdict(c)
        for c in calls
        if c.status >= 500 and in_outage(c, outages) and c.status not in (503, 504)
    ]
    streams = [c for c in calls if c.stream and c.status == 200]
    mismatched = [
        asdict(c)
        for c in streams
        if not c.errors
        and c.job in jobs
        and jobs[c.job]["status"] == "succeeded"
        and c.text != jobs[c.job]["output_text"]
    ]
    unterminated = [
        asdict(c)
        for c in streams
        if not c.errors and jobs.get(c.job, {}).get("status") != "succeeded"
    ]
    statuses: dict[str, int] = {}
    for call in calls:
        key = str(call.status) if call.status else f"no answer ({call.exception})"
        statuses[key] = statuses.get(key, 0) + 1
    outcomes: dict[str, int] = {}
    for job in jobs.values():
        key = job["status"] + (f" ({job['failure']})" if job["failure"] else "")
        outcomes[key] = outcomes.get(key, 0) + 1
    return {
        "calls": len(calls),
        "streamed": sum(c.stream for c in calls),
        "statuses": statuses,
        "jobs": len(jobs),
        "job_outcomes": outcomes,
        "streams_ended_by_error": sum(1 for c in streams if c.errors),
        "stream_error_codes": sorted({code for c in streams for code in c.errors}),
        "lost_jobs": lost,
        "unfinished_jobs": unfinished,
        "5xx_outside_outages": outside_5xx,
        "not_503_inside_outages": inside_bad,
        "streams_differing_from_output_text": mismatched,
        "streams_without_an_answer_or_error": unterminated,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=180)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = parser.parse_args()
    report = run_facts("chaos.py")
    report["load_before"] = load_average()
    workdir = Path(tempfile.mkdtemp(prefix="pathfinder-chaos-"))
    cluster = PrivatePostgres()
    try:
        cluster.start()
        cluster.execute(f"CREATE ROLE {APP_ROLE} LOGIN")
        with running_fault_stack(cluster, workdir, matters=MATTERS) as stack:
            report["result"], report["chaos"] = soak(stack, args)
    finally:
        cluster.stop()
        cluster.remove()
    report["load_after"] = load_average()
    result = report["result"]
    report["passed"] = (
        not result["lost_jobs"]
        and not result["unfinished_jobs"]
        and not result["5xx_outside_outages"]
        and not result["not_503_inside_outages"]
        and not result["streams_differing_from_output_text"]
        and not result["streams_without_an_answer_or_error"]
        and result["verify_chain"]["ok"]
    )
    save_results(args.out, "chaos", report, render(report))
    print(render(report))
    return 0 if report["passed"] else 1


def soak(stack: FaultStack, args) -> tuple[dict, dict]:
    # Warm both workers (a first load takes tens of seconds) before the clock starts.
    for matter in MATTERS:
        requests.post(
            stack.url("/v1/completions"),
            json={"model": MODEL, "prompt": "Hello", "max_tokens": 2},
            headers=auth(stack.keys[matter]),
            timeout=300,
        )
    calls: list[Call] = []
    outages: list[Outage] = []
    kills: list[dict] = []
    stop = threading.Event()
    clients = [
        threading.Thread(target=client_loop, args=(stack, i, stop, calls, i), daemon=True)
        for i in range(args.clients)
    ]
    chaos = threading.Thread(
        target=chaos_loop, args=(stack, args.seconds, stop, outages, kills), daemon=True
    )
    started = time.monotonic()
    for thread in [*clients, chaos]:
        thread.start()
    time.sleep(args.seconds)
    stop.set()
    for thread in [*clients, chaos]:
        thread.join(timeout=240)
    jobs = drain(stack)
    result = analyse(calls, jobs, outages)
    verified = stack.manage("verify_chain", "--all", "--json", timeout=300)
    verdict = json.loads(verified.stdout) if verified.stdout.strip() else {}
    result["verify_chain"] = {
        "exit": verified.returncode,
        "ok": bool(verdict.get("ok")),
        "trails": verdict.get("trails_checked"),
        "records": verdict.get("records_covered"),
        "failures": verdict.get("failures", [])[:5],
    }
    chaos_facts = {
        "seconds": args.seconds,
        "clients": args.clients,
        "worker_kills": kills,
        "outages": [
            {
                "what": o.what,
                "from_s": round(o.started - started, 1),
                "to_s": round(o.ended - started, 1),
            }
            for o in outages
        ],
        "recovery_grace_s": RECOVERY_GRACE_S,
        # Each worker decodes this many jobs at once in one sequence engine (tests/faults/stack.py).
        "worker_sequences": int(stack.owner_env["PATHFINDER_WORKER_SEQUENCES"]),
    }
    return result, chaos_facts


def render(report: dict) -> str:
    result, chaos = report["result"], report["chaos"]
    outages = ", ".join(f"{o['what']} {o['from_s']}-{o['to_s']} s" for o in chaos["outages"])
    kills = ", ".join(f"{k['killed']} at {k['at']} s" for k in chaos["worker_kills"])
    verify = result["verify_chain"]
    checks = [
        ("jobs lost", len(result["lost_jobs"]) + len(result["unfinished_jobs"])),
        ("5xx outside the outage windows", len(result["5xx_outside_outages"])),
        ("5xx other than 503/504 inside them", len(result["not_503_inside_outages"])),
        ("streams differing from output_text", len(result["streams_differing_from_output_text"])),
        (
            "streams not ended by [DONE] after the answer or an error",
            len(result["streams_without_an_answer_or_error"]),
        ),
    ]
    lines = [
        "# Chaos soak",
        "",
        f"Command: `{report['command']}` at {report['revision']}, {report['date']}.",
        f"Machine: {report['machine']}.",
        f"Load before {report['load_before']}, after {report['load_after']}.",
        "",
        f"{chaos['clients']} clients for {chaos['seconds']:.0f} s over two matters, every other "
        f"call streamed; two workers, each decoding up to {chaos['worker_sequences']} jobs at "
        f"once in one sequence engine; workers killed: {kills or 'none'}; outages: {outages} "
        f"(each window extended by {chaos['recovery_grace_s']} s of recovery).",
        "",
        f"Calls: {result['calls']} ({result['streamed']} streamed); statuses "
        f"{json.dumps(result['statuses'])}. Jobs: {result['jobs']}, "
        f"{json.dumps(result['job_outcomes'])}. Streams ended by an error event: "
        f"{result['streams_ended_by_error']} ({', '.join(result['stream_error_codes']) or '-'}).",
        "",
        "| check | found |",
        "|---|---:|",
        *(f"| {name} | {count} |" for name, count in checks),
        f"| verify_chain --all | {'intact' if verify['ok'] else 'BROKEN'} ({verify['trails']} "
        f"trails, {verify['records']} records) |",
        "",
        f"**{'PASSED' if report['passed'] else 'FAILED'}**",
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())

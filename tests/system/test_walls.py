"""The attacker's suite (issue 39, docs/adr/0024): a key of matter B tries to read matter A's
confidential prompt through what a real worker shares, on real gunicorn, Celery and PostgreSQL
processes and the real default model.

Each attack runs twice: as B, where it must recover nothing, and as a second key of matter A,
the same oracle on the same stack, where it must recover the secret. The second run is the
proof that the attack works and the wall is what stops it. It is also what the matter's own
users are owed: their cache keeps working.

- the prefix oracle through counts: `<A's preamble>$` plus one candidate character, read from
  `usage.prompt_tokens_details.cached_tokens`, with the worker's prompt cache and sequence engine;
- the same through latency: many trials, medians compared, never single timings;
- slot reuse with the prompt cache off, on a batching worker and on a prefork one;
- cross-matter drafting: a job never copies drafts from another matter's remembered jobs.
"""

from __future__ import annotations

import json
import secrets
import socket
import statistics
import subprocess
import sys
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
import requests

from .helpers import (
    Stack,
    auth,
    create_database,
    describe,
    drop_database,
    forget_queue,
    free_port,
    isolated_env,
    last_line,
    postgres_url,
    start_process,
    stop_all,
    wait_for_workers,
    wait_until_healthy,
)

pytestmark = [pytest.mark.system, pytest.mark.timeout(600)]

MODEL = "smollm2-135m-instruct"
HELDOUT = Path(__file__).resolve().parents[2] / "bench" / "data" / "heldout"
SECRET = "3,918,204"
PREAMBLE = (
    "PRIVILEGED AND CONFIDENTIAL. Settlement memorandum, Harrow v. Lindqvist Freight.\n"
    + (HELDOUT / "apache-2.0-sections-2-5.txt").read_text()[:900]
    + "\nThe parties agree that the defendant pays the sum of $"
)
CONFIDENTIAL = PREAMBLE + SECRET + " in full settlement of all claims."
# What follows a guess, so the guessed character is inside the prefill (the last prompt token
# is evaluated with the first decision, never cached).
AFTER_GUESS = " in full"
CANDIDATES = "0123456789,"

BATCHING = {"PATHFINDER_WORKER_SEQUENCES": "8"}
BATCHING_NO_CACHE = {"PATHFINDER_WORKER_SEQUENCES": "8", "PATHFINDER_PROMPT_CACHE_BYTES": "0"}
PREFORK_NO_CACHE = {"PATHFINDER_WORKER_SEQUENCES": "1", "PATHFINDER_PROMPT_CACHE_BYTES": "0"}


class WallStack(Stack):
    """One web process and one worker, so every request meets the state the last one left."""

    keys: dict[str, str]
    log_dir: Path
    worker_env: dict[str, str] | None = None

    def use_worker(self, env: dict[str, str]) -> None:
        """Run the worker with `env` (restarting it if it runs with another)."""
        if self.worker_env == env:
            return
        if "worker" in self.processes:
            stop_all([self.processes.pop("worker")])
        self.processes["worker"] = start_process(
            "worker",
            [sys.executable, "-m", "celery", "-A", "pathfinder_site", "worker",
             "-n", self.worker_names[0], "--loglevel", "INFO"],
            {**self.env, **env}, self.log_dir,
        )  # fmt: skip
        wait_for_workers(self)
        self.worker_env = env
        complete(self, self.keys["a"], "Warm up.", max_tokens=1)  # the model loads


@pytest.fixture(scope="module")
def walls(tmp_path_factory) -> Iterator[WallStack]:
    suffix = secrets.token_hex(4)
    database = f"pathfinder_walls_{suffix}"
    admin_url = create_database(database)
    log_dir = tmp_path_factory.mktemp("walls-stack")
    env = {**isolated_env(database, suffix, log_dir), "PATHFINDER_LLAMA_THREADS": "1"}
    port = free_port()
    stack = WallStack(
        base_url=f"http://127.0.0.1:{port}",
        api_key="",
        env=env,
        database=database,
        database_url=postgres_url(database),
        worker_names=[f"walls-{suffix}@{socket.gethostname()}"],
    )
    stack.log_dir = log_dir
    try:
        migrated = stack.manage("migrate", "--noinput")
        assert migrated.returncode == 0, describe(migrated)
        stack.keys = {
            name: last_line(stack.manage("create_api_key", "--matter", matter, name))
            for name, matter in (("a", "firm-a"), ("a2", "firm-a"), ("b", "firm-b"))
        }
        stack.processes["gunicorn"] = start_process(
            "gunicorn",
            [sys.executable, "-m", "gunicorn", "pathfinder_site.wsgi:application",
             "--bind", f"127.0.0.1:{port}", "--workers", "1", "--threads", "4"],
            env, log_dir,
        )  # fmt: skip
        wait_until_healthy(stack.base_url, list(stack.processes.values()))
        yield stack
    finally:
        stop_all(list(stack.processes.values()))
        drop_database(admin_url, database)
        forget_queue(env["CELERY_BROKER_URL"], env["PATHFINDER_TASK_QUEUE"])


def complete(stack: Stack, key: str, prompt: str, max_tokens: int = 1) -> dict:
    """One /v1/completions call, greedy; its body with the seconds it took as `elapsed`."""
    started = time.monotonic()
    response = requests.post(
        stack.url("/v1/completions"),
        json={"model": MODEL, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0},
        headers=auth(key),
        timeout=120,
    )
    assert response.status_code == 200, response.text
    return {**response.json(), "elapsed": time.monotonic() - started}


def cached_tokens(body: dict) -> int:
    return body["usage"]["prompt_tokens_details"]["cached_tokens"]


def prefix_oracle(stack: Stack, key: str, characters: int) -> tuple[str, list[list[int]]]:
    """Recover the secret's first `characters` characters as the attacker did: for each, the
    candidate whose guess the service reports the most cached tokens for. Returns what it
    recovered, ending in "?" where no candidate stood out (the attacker is stuck there), and
    every count it read."""
    recovered, counts = "", []
    for _ in range(characters):
        read = [
            cached_tokens(complete(stack, key, PREAMBLE + recovered + c + AFTER_GUESS))
            for c in CANDIDATES
        ]
        counts.append(read)
        best = max(read)
        if read.count(best) != 1:
            return recovered + "?", counts
        recovered += CANDIDATES[read.index(best)]
    return recovered, counts


def test_the_prefix_oracle_through_cached_tokens_recovers_nothing_across_the_wall(walls):
    walls.use_worker(BATCHING)
    complete(walls, walls.keys["a"], CONFIDENTIAL)  # matter A reads its memorandum
    first_guess = complete(walls, walls.keys["b"], PREAMBLE + "x" + AFTER_GUESS)
    assert cached_tokens(first_guess) == 0  # nothing of A's counted for B
    recovered, counts = prefix_oracle(walls, walls.keys["b"], 3)
    assert recovered == "?", counts  # every guess counted alike: B's own first guess's prefix
    # The same oracle with a key of matter A itself reads the figure: the attack works, and
    # the wall is what stops it (the matter's own cache keeps serving it).
    recovered, counts = prefix_oracle(walls, walls.keys["a2"], 3)
    assert recovered == SECRET[:3], counts


# About 1,000 tokens: long enough that its prefill, not the request's own overheads (which vary
# by a few tenths of a second), makes most of the latency.
MEMO_CHARS = 4500
# More than a memo's header ("Memo <12 hex digits> (kind).") can take, far fewer than its text.
HEADER_TOKENS = 20


def fresh_memo(trial: int, kind: str) -> str:
    """A memorandum no request has sent: a header of its own, then the trial's cut of held-out
    text. Every kind of a trial shares the cut, so their prefills cost alike, and shares no
    prefix past "Memo " with any other (a KV cache keeps only a shared prefix)."""
    text = (HELDOUT / "gpl-3.0.txt").read_text()
    start = 3000 * trial % (len(text) - MEMO_CHARS) + 97
    return f"Memo {secrets.token_hex(6)} ({kind}).\n" + text[start : start + MEMO_CHARS]


def test_latency_tells_another_matter_nothing_of_a_matters_document(walls):
    """B sends the exact document A just sent, and a fresh one of the same length: the medians
    over many trials agree within 0.8-1.25x. A's second key, sending A's document, is served
    from the cache (the control: the signal is there to be found)."""
    walls.use_worker(BATCHING)
    question = "\n\nQuestion: Who are the parties?\nAnswer:"
    across, fresh, within = [], [], []
    for trial in range(9):
        documents = {kind: fresh_memo(trial, kind) for kind in ("a", "fresh", "own")}
        complete(walls, walls.keys["a"], documents["a"] + question)
        complete(walls, walls.keys["a"], documents["own"] + question)
        # Each goes first in turn, so neither always follows the same kind of job.
        probes = [(across, documents["a"]), (fresh, documents["fresh"])]
        for timings, document in probes if trial % 2 else probes[::-1]:
            timings.append(complete(walls, walls.keys["b"], document + question))
        within.append(complete(walls, walls.keys["a2"], documents["own"] + question))
    # B's own earlier memos can share at most a memo's header with these (its random hex ends
    # every shared prefix; CI saw up to 5 tokens); A's share all of them, about 1,000 tokens.
    counts = [(cached_tokens(b), cached_tokens(f)) for b, f in zip(across, fresh, strict=True)]
    assert all(b < HEADER_TOKENS and f < HEADER_TOKENS for b, f in counts), counts
    ratio = statistics.median(b["elapsed"] for b in across) / statistics.median(
        b["elapsed"] for b in fresh
    )
    timings = [(b["elapsed"], f["elapsed"]) for b, f in zip(across, fresh, strict=True)]
    assert 0.8 <= ratio <= 1.25, timings
    control = statistics.median(b["elapsed"] for b in within) / statistics.median(
        b["elapsed"] for b in fresh
    )
    assert control < 0.8 and all(cached_tokens(body) > 200 for body in within), control


@pytest.mark.parametrize(
    "worker", [BATCHING_NO_CACHE, PREFORK_NO_CACHE], ids=["batching", "prefork"]
)
def test_with_the_prompt_cache_off_the_last_jobs_slot_tells_another_matter_nothing(walls, worker):
    """One job after another lands on the same slot (the lowest free one, or a prefork
    worker's one sequence), whose KV cells still hold the last job's tokens."""
    walls.use_worker(worker)
    complete(walls, walls.keys["a"], CONFIDENTIAL)
    control = complete(walls, walls.keys["a2"], PREAMBLE + SECRET[0] + AFTER_GUESS)
    assert cached_tokens(control) > 200  # the same matter's next job starts from the slot
    complete(walls, walls.keys["a"], CONFIDENTIAL)
    probe = complete(walls, walls.keys["b"], PREAMBLE + SECRET[0] + AFTER_GUESS)
    assert cached_tokens(probe) == 0


def job_id(body: dict) -> str:
    return body["id"].removeprefix("cmpl-")


def drafted_from(stack: Stack, job_id: str) -> set[str]:
    """The remembered jobs a job's copied drafts name as their source."""
    references = steps_by_source(stack, job_id).values()
    return {reference for reference in references if reference not in (None, "context")}


def test_a_job_never_copies_drafts_from_another_matters_jobs(walls):
    walls.use_worker(BATCHING)
    quote = (
        "Repeat exactly: The brake defect in March 2021 was known to the fleet manager, who "
        "ordered the trucks back on the road without repair."
    )
    source = complete(walls, walls.keys["a"], quote, max_tokens=40)
    ask = "Repeat exactly: The brake defect in March"
    across = complete(walls, walls.keys["b"], ask, max_tokens=30)
    within = complete(walls, walls.keys["a2"], ask, max_tokens=30)
    source_id = job_id(source)
    assert source_id not in drafted_from(walls, job_id(across))
    assert source_id in drafted_from(walls, job_id(within))  # the control: it copies


def test_a_whole_bundle_keeps_a_step_copied_from_another_job_sealed(walls, tmp_path):
    """Issue 39 item 3: a bundle that withholds nothing still keeps sealed the steps whose
    draft was copied from another job of the matter: their workings (the copied tokens, their
    p values, the other job's id and offset) are that job's text. Every other step is opened and
    re-checked, and the bundle verifies."""
    walls.use_worker(BATCHING)
    quote = (
        "Repeat exactly: The fleet manager signed the maintenance waiver on 14 April, two days "
        "after the mechanic reported cracked brake drums on unit 7."
    )
    source = complete(walls, walls.keys["a"], quote, max_tokens=40)
    copied = complete(walls, walls.keys["a2"], "Repeat exactly: The fleet manager", max_tokens=30)
    source_id, copied_id = job_id(source), job_id(copied)
    assert source_id in drafted_from(walls, copied_id)
    made = walls.manage(
        "shell", "-c", "from audit.keys import signing_key_create as k; print(k()[0].verifier)"
    )
    verifier = last_line(made)
    assert walls.manage("checkpoint").returncode == 0
    path = tmp_path / "whole.zip"
    exported = walls.manage("export_trail", "--job", copied_id, "--out", str(path))
    assert exported.returncode == 0, describe(exported)
    with zipfile.ZipFile(path) as bundle:
        members = {name: bundle.read(name) for name in bundle.namelist()}
    opened = {n for n in json.loads(members["disclosures.json"]) if n.startswith("step.")}
    steps = steps_by_source(walls, copied_id)
    elsewhere = {step for step, reference in steps.items() if reference == source_id}
    assert elsewhere and opened == {f"step.{s}.workings" for s in steps.keys() - elsewhere}
    for name, data in members.items():
        assert source_id.encode() not in data, name  # the other job is not even named
    verified = subprocess.run(
        [sys.executable, "-m", "audit.offline_verify", str(path), "--key", verifier],
        capture_output=True, text=True, timeout=120, env=walls.env,
    )  # fmt: skip
    assert f"{len(steps) - len(elsewhere)} of {len(steps)} decisions re-checked" in (
        verified.stdout
    ), verified.stdout


def steps_by_source(stack: Stack, job_id: str) -> dict[int, str | None]:
    """Each decision's step and the reference its draft was copied from (None: nothing), read
    from the workings the store keeps beside each format-4 record."""
    with psycopg.connect(stack.database_url, autocommit=True) as db:
        rows = db.execute(
            """SELECT r.seq, r.openings FROM audit_decisionrecord r
               JOIN audit_trail t ON t.id = r.trail_id
               WHERE t.job_id = %s AND r.kind = 'decision' ORDER BY r.seq""",
            [job_id],
        ).fetchall()
    found = {}
    for seq, openings in rows:
        (workings,) = json.loads(openings).values()
        found[seq - 1] = (workings["draft_source"] or {}).get("reference")
    return found

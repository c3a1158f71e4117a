"""Faults injected into real processes. After each: every job ended succeeded, or failed with a
reason; no job is lost; every output is exactly the tokens of its committed records; every trail
verifies."""

from __future__ import annotations

import json
import os
import signal
import time

import psycopg
import pytest
import requests

from audit.evidence.sealing import open_decision
from tests.system.helpers import FINISHED, auth, describe, get, submit

from .stack import APP_ROLE, FaultStack

pytestmark = [pytest.mark.faults, pytest.mark.timeout(400)]

MODEL = "smollm2-135m-instruct"
PROMPT = "Write a long story about a lighthouse keeper and the sea."


def submit_jobs(stack: FaultStack, count: int, max_tokens: int = 200) -> list[str]:
    ids = []
    for i in range(count):
        response = submit(
            stack,
            # No end-of-sequence token: each job decodes its full length, long enough to fault.
            {"model": MODEL, "prompt": PROMPT, "max_tokens": max_tokens, "seed": i,
             "temperature": 0.8, "eos_token_id": None},
        )  # fmt: skip
        assert response.status_code == 202, response.text
        ids.append(response.json()["id"])
    return ids


def db(stack: FaultStack):
    return psycopg.connect(stack.database_url, autocommit=True)


def rows(stack: FaultStack, query: str, *params) -> list[tuple]:
    with db(stack) as conn:
        return conn.execute(query, params).fetchall()


def wait_until(predicate, timeout: float = 60, every: float = 0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"not within {timeout}s: {predicate.__doc__ or predicate}")


def a_running_job_with_records(stack: FaultStack, decisions: int = 0) -> tuple[str, str] | None:
    """(job id, host:pid of its worker process) of a job that has committed records (its
    request and at least `decisions` decisions)."""
    found = rows(
        stack,
        """SELECT j.id::text, j.worker FROM decoding_generationjob j
           JOIN audit_trail t ON t.id = j.trail_id
           WHERE j.status = 'running' AND t.record_count > %s LIMIT 1""",
        decisions,
    )
    return found[0] if found else None


def assert_nothing_lost(stack: FaultStack, job_ids: list[str], timeout: float = 180) -> dict:
    """The suite's invariants; returns {job id: job} for further checks."""
    deadline = time.monotonic() + timeout
    jobs: dict[str, dict] = {}
    while time.monotonic() < deadline:
        found = rows(
            stack,
            "SELECT id::text, status, error, failure, output_token_ids, trail_id::text "
            "FROM decoding_generationjob",
        )
        jobs = {
            job_id: {"status": s, "error": e, "failure": f, "output": o, "trail": t}
            for job_id, s, e, f, o, t in found
        }
        if set(job_ids) <= set(jobs) and all(j["status"] in FINISHED for j in jobs.values()):
            break
        time.sleep(0.25)
    unfinished = {k: v["status"] for k, v in jobs.items() if v["status"] not in FINISHED}
    assert not unfinished, f"jobs not finished: {unfinished}\n{stack.log_tails()}"
    assert set(job_ids) <= set(jobs), "a submitted job is missing"
    for job_id, job in jobs.items():
        assert job["status"] in ("succeeded", "failed"), (job_id, job)
        if job["status"] == "failed":
            assert job["error"], f"job {job_id} failed without a reason"
            assert job["output"] == [], f"failed job {job_id} released tokens"
        recorded = recorded_tokens(stack, job["trail"])
        if job["status"] == "succeeded":
            assert job["output"] == recorded, f"job {job_id}: output differs from its records"
    verified = stack.manage("verify_chain", "--all", "--json", timeout=120)
    report = json.loads(verified.stdout) if verified.stdout.strip() else {}
    assert verified.returncode == 0 and report.get("ok"), describe(verified)
    return jobs


def recorded_tokens(stack: FaultStack, trail_id: str) -> list[int]:
    """The tokens a trail's committed decisions emitted, in order."""
    return [
        token
        for payload, openings in rows(
            stack,
            "SELECT payload, openings FROM audit_decisionrecord"
            " WHERE trail_id = %s AND kind = 'decision' ORDER BY seq",
            trail_id,
        )
        for token in open_decision(json.loads(payload), json.loads(openings))["emitted"]
    ]


def kill_worker(stack: FaultStack, worker: str) -> None:
    """SIGKILL the Celery worker (master and pool child) of `host:pid`: a machine lost."""
    pid = int(worker.rsplit(":", 1)[1])
    victim = next(p for p in stack.processes.values() if p.popen.pid == os.getpgid(pid))
    os.killpg(victim.popen.pid, signal.SIGKILL)


def test_a_worker_killed_mid_decode_loses_nothing(fault_stack):
    stack = fault_stack
    job_ids = submit_jobs(stack, 4)
    job_id, worker = wait_until(lambda: a_running_job_with_records(stack, decisions=2))
    kill_worker(stack, worker)  # mid-decode, some of its tokens committed

    jobs = assert_nothing_lost(stack, job_ids)
    assert jobs[job_id]["status"] == "succeeded"
    attempts = rows(
        stack,
        "SELECT attempt, outcome, previous_id::text, id::text FROM audit_trail "
        "WHERE job_id = %s ORDER BY attempt",
        job_id,
    )
    assert len(attempts) >= 2
    assert attempts[0][1] == "abandoned" and attempts[-1][1] == "succeeded"
    assert attempts[1][2] == attempts[0][3]  # the new trail links the abandoned one

    # The jobs are seeded: the attempt that ran after the kill, on the other worker, emitted the
    # same tokens the killed one had committed, and the same request submitted again gets the
    # whole answer again (coupled sampling, ADR 0032).
    before_kill = recorded_tokens(stack, attempts[0][3])
    assert before_kill and jobs[job_id]["output"][: len(before_kill)] == before_kill
    seed = job_ids.index(job_id)
    body = {"model": MODEL, "prompt": PROMPT, "max_tokens": 200, "seed": seed,
            "temperature": 0.8, "eos_token_id": None}  # fmt: skip
    again = submit(stack, body).json()["id"]
    assert assert_nothing_lost(stack, [again])[again]["output"] == jobs[job_id]["output"]


def test_a_stream_whose_worker_dies_never_mixes_two_attempts(fault_stack):
    stack = fault_stack
    body = {"model": MODEL, "prompt": PROMPT, "max_tokens": 200, "ignore_eos": True,
            "temperature": 0.8, "seed": 5, "stream": True}  # fmt: skip
    response = requests.post(stack.url("/v1/completions"), json=body, headers=auth(stack.api_key),
                             stream=True, timeout=120)  # fmt: skip
    assert response.status_code == 200, response.text
    job_id = response.headers["X-Pathfinder-Job"]
    text, errors, killed = "", [], False
    for line in response.iter_lines():
        if not line.startswith(b"data: ") or line == b"data: [DONE]":
            continue
        event = json.loads(line[len(b"data: ") :])
        if "error" in event:
            errors.append(event["error"])
            continue
        text += event["choices"][0]["text"] or ""
        if text and not killed:  # part of the answer is out: its worker dies now
            (worker,) = rows(stack, "SELECT worker FROM decoding_generationjob WHERE id = %s",
                             job_id)[0]  # fmt: skip
            kill_worker(stack, worker)
            killed = True
    assert killed
    jobs = assert_nothing_lost(stack, [job_id])
    assert jobs[job_id]["status"] == "succeeded"
    answer = get(stack, f"/api/v1/generations/{job_id}").json()["output_text"]
    # Either the stream is the job's answer, or it says it broke off: never a mix of attempts.
    if errors:
        assert [e["code"] for e in errors] == ["attempt_changed"], errors
    else:
        assert text == answer


def test_a_stream_across_a_postgresql_restart_ends_with_its_answer_or_an_error(fault_stack):
    """Found by bench/chaos.py: a stream whose store went away mid-answer stopped without a
    word (or, before its first chunk, as gunicorn's bare 500)."""
    stack = fault_stack
    body = {"model": MODEL, "prompt": PROMPT, "max_tokens": 200, "ignore_eos": True,
            "temperature": 0.8, "seed": 11, "stream": True}  # fmt: skip
    response = requests.post(stack.url("/v1/completions"), json=body, headers=auth(stack.api_key),
                             stream=True, timeout=120)  # fmt: skip
    assert response.status_code == 200, response.text
    job_id = response.headers["X-Pathfinder-Job"]
    text, errors, done, restarted = "", [], False, False
    for line in response.iter_lines():
        if line == b"data: [DONE]":
            done = True
            continue
        if not line.startswith(b"data: "):
            continue
        event = json.loads(line[len(b"data: ") :])
        if "error" in event:
            errors.append(event["error"]["code"])
            continue
        text += event["choices"][0]["text"] or ""
        if text and not restarted:
            stack.pg.restart()
            restarted = True
    assert restarted and done, "the stream must end with [DONE]"
    jobs = assert_nothing_lost(stack, [job_id])
    if errors:
        assert errors == ["service_unavailable"], errors
    else:
        assert jobs[job_id]["status"] == "succeeded"
        assert text == get(stack, f"/api/v1/generations/{job_id}").json()["output_text"]


def test_postgresql_restarted_mid_job_loses_nothing(fault_stack):
    stack = fault_stack
    job_ids = submit_jobs(stack, 4)
    wait_until(lambda: a_running_job_with_records(stack))
    stack.pg.restart()
    assert_nothing_lost(stack, job_ids)
    after = submit_jobs(stack, 1, max_tokens=20)  # and the service works again
    assert assert_nothing_lost(stack, after)[after[0]]["status"] == "succeeded"


def test_redis_stopped_while_jobs_are_queued_loses_nothing(fault_stack):
    stack = fault_stack
    job_ids = submit_jobs(stack, 6, max_tokens=120)  # two run, four wait in the queue
    wait_until(lambda: a_running_job_with_records(stack))
    stack.redis.stop()  # the queued messages are gone with it (no persistence)
    refused = requests.post(
        stack.url("/api/v1/generations"),
        json={"model": MODEL, "prompt": PROMPT, "max_tokens": 10},
        headers=auth(stack.api_key),
        timeout=60,
    )
    assert refused.status_code == 503, refused.text
    time.sleep(2)
    stack.redis.start()
    jobs = assert_nothing_lost(stack, job_ids, timeout=240)
    assert all(jobs[job_id]["status"] == "succeeded" for job_id in job_ids)
    # The refused submission was stored and failed with its reason, never silently dropped.
    failed = [j for j in jobs.values() if j["status"] == "failed"]
    assert len(failed) == 1 and failed[0]["failure"] == "queue_unavailable"


def test_an_audit_store_that_refuses_inserts_fails_jobs_closed(fault_stack):
    stack = fault_stack
    job_ids = submit_jobs(stack, 3, max_tokens=300)
    wait_until(lambda: a_running_job_with_records(stack))
    with db(stack) as conn:
        conn.execute(f"REVOKE INSERT ON audit_decisionrecord FROM {APP_ROLE}")
    refused = submit_jobs(stack, 1, max_tokens=50)
    jobs = assert_nothing_lost(stack, job_ids + refused)
    failures = [j for j in jobs.values() if j["status"] == "failed"]
    assert failures, "no job met the refusing store"
    assert all(j["failure"] == "audit_unavailable" for j in failures)
    # The cause (the refused INSERT) is in the workers' logs with the job id, not in the job.
    assert not any("permission denied" in j["error"] for j in failures)
    assert any("permission denied" in p.log() for p in stack.processes.values())

    with db(stack) as conn:
        conn.execute(f"GRANT INSERT ON audit_decisionrecord TO {APP_ROLE}")
    again = submit_jobs(stack, 1, max_tokens=20)
    assert assert_nothing_lost(stack, again)[again[0]]["status"] == "succeeded"


def test_two_workers_handed_the_same_job_run_it_once(fault_stack):
    stack = fault_stack
    (job_id,) = submit_jobs(stack, 1, max_tokens=200)
    for _ in range(2):  # the same message redelivered, as a broker may
        sent = stack.celery("call", "decoding.run_generation", "--args", json.dumps([job_id]))
        assert sent.returncode == 0, describe(sent)
    jobs = assert_nothing_lost(stack, [job_id])
    assert jobs[job_id]["status"] == "succeeded"
    trails = rows(stack, "SELECT attempt, outcome FROM audit_trail WHERE job_id = %s", job_id)
    assert trails == [(1, "succeeded")]  # one attempt, one trail, one output
    job = get(stack, f"/api/v1/generations/{job_id}").json()
    assert job["attempts"] == 1

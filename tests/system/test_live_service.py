"""The service as deployed: gunicorn and two Celery workers on PostgreSQL and Redis.

Tests share one stack and run in file order; the tampering test must stay last, because it
breaks the chain that the others verify.
"""

from __future__ import annotations

import json
import sys
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from itertools import combinations

import psycopg
import pytest
import requests
from psycopg import sql

from .helpers import (
    Stack,
    auth,
    describe,
    free_port,
    get,
    start_process,
    stop_all,
    submit,
    wait_for,
    wait_until_healthy,
)

pytestmark = [pytest.mark.system, pytest.mark.timeout(180)]


def trail_records(stack: Stack, trail_url: str, limit: int) -> tuple[list[dict], int]:
    """Every record of a trail, following the `next` links; returns (records, pages)."""
    records: list[dict] = []
    pages = 0
    url: str | None = f"{trail_url}?limit={limit}"
    while url:
        response = get(stack, url)
        assert response.status_code == 200, response.text
        page = response.json()
        records += page["results"]
        pages += 1
        url = page["next"]
    return records, pages


def verify_json(stack: Stack, *scope: str) -> tuple[int, dict]:
    completed = stack.manage("verify_chain", *scope, "--json")
    assert completed.returncode in (0, 1), describe(completed)
    return completed.returncode, json.loads(completed.stdout)


def test_a_job_submitted_over_http_completes_on_a_real_worker_and_verifies(postgres_stack):
    stack = postgres_stack
    body = {
        "prompt_token_ids": [1, 2, 3],
        "max_tokens": 24,
        "temperature": 0,
        "request_id": "sys-1",
    }

    response = submit(stack, body)

    assert response.status_code == 202, response.text
    location = response.headers["Location"]
    job_id = response.json()["id"]
    assert location.endswith(f"/api/v1/generations/{job_id}")
    job = wait_for(stack, job_id)
    assert job["status"] == "succeeded", job
    output = job["output_token_ids"]
    eos = job["params"]["eos_token_id"]
    assert len(output) == 24 or (eos is not None and output[-1] == eos and len(output) < 24)

    # A small page size makes the client follow several `next` links.
    records, pages = trail_records(stack, f"{location}/trail", limit=2)
    assert job["trail"]["records"] >= 1
    assert len(records) == job["trail"]["records"]
    assert pages == -(-len(records) // 2)
    assert [record["seq"] for record in records] == list(range(len(records)))
    # No token without a committed record: the records' emitted tokens are the output, exactly.
    decisions = [record["decision"] for record in records if record["kind"] == "decision"]
    assert [record["kind"] for record in records] == [
        "request",
        *["decision"] * len(decisions),
        "answer",
    ]
    emitted = [token for decision in decisions for token in decision["emitted"]]
    assert emitted == output
    # The worker marked the message it received (decoding.delivery) before it ran the job.
    with psycopg.connect(stack.database_url) as db:
        held_by, received, enqueued = db.execute(
            "SELECT held_by, received_at, enqueued_at FROM decoding_generationjob WHERE id = %s",
            [job_id],
        ).fetchone()
    assert held_by in stack.worker_names and enqueued <= received, (held_by, received, enqueued)

    checked = stack.manage("verify_chain", "--job", job_id)
    assert checked.returncode == 0, describe(checked)
    code, report = verify_json(stack, "--job", job_id)
    assert code == 0 and report["ok"] is True, report
    assert report["records_checked"] == len(records)

    # The same request_id is the same job, not a second one.
    again = submit(stack, body)
    assert again.status_code == 200, again.text
    assert again.json()["id"] == job_id


def test_several_jobs_decode_at_once_in_two_worker_processes(postgres_stack):
    stack = postgres_stack
    bodies = [
        {
            "prompt_token_ids": [i % 7, 3, 5],
            "max_tokens": 200,
            "temperature": 0 if i % 2 else 0.8,
            "seed": 1000 + i,
        }
        for i in range(8)
    ]

    with ThreadPoolExecutor(max_workers=len(bodies)) as pool:
        responses = list(pool.map(lambda body: submit(stack, body), bodies))
    assert [r.status_code for r in responses] == [202] * len(bodies), [r.text for r in responses]
    jobs = [wait_for(stack, r.json()["id"], timeout=90) for r in responses]

    assert [job["status"] for job in jobs] == ["succeeded"] * len(jobs), jobs
    intervals = [
        (datetime.fromisoformat(job["started_at"]), datetime.fromisoformat(job["finished_at"]))
        for job in jobs
    ]
    overlapping = [(a, b) for a, b in combinations(intervals, 2) if a[0] < b[1] and b[0] < a[1]]
    assert overlapping, f"no two jobs decoded at the same time: {intervals}"
    # Each worker's own count of the tasks it ran: both took part.
    stats = stack.inspect("stats")
    # Started as the README says (no pool or concurrency flags): PATHFINDER_WORKER_SEQUENCES
    # threads, each job on a slot of one batch.
    pools = {name: stats.get(name, {}).get("pool", {}) for name in stack.worker_names}
    assert all(pool.get("max-concurrency") == 8 for pool in pools.values()), pools
    taken = {name: stats.get(name, {}).get("total", {}) for name in stack.worker_names}
    assert all(counts.get("decoding.run_generation", 0) >= 1 for counts in taken.values()), taken

    code, report = verify_json(stack, "--all")
    assert code == 0 and report["ok"] is True, report
    assert report["trails_checked"] >= len(jobs)
    assert report["ledger_entries_checked"] >= len(jobs)


def test_another_matters_key_sees_nothing(postgres_stack):
    stack = postgres_stack
    response = submit(stack, {"prompt_token_ids": [4, 2], "max_tokens": 4})
    assert response.status_code == 202, response.text
    job_id = response.json()["id"]
    assert wait_for(stack, job_id)["status"] == "succeeded"

    as_other = stack.other_api_key
    assert get(stack, f"/api/v1/generations/{job_id}", as_other).status_code == 404
    assert get(stack, f"/api/v1/generations/{job_id}/trail", as_other).status_code == 404
    # The job is there for its own matter, so the 404s are the scoping, not a missing job.
    assert get(stack, f"/api/v1/generations/{job_id}/trail").status_code == 200


def test_text_in_text_out_on_the_real_default_model_with_token_texts_in_the_trail(
    postgres_stack,
):
    stack = postgres_stack
    body = {
        "model": "smollm2-135m-instruct",
        "messages": [{"role": "user", "content": "Name three primary colours."}],
        "max_tokens": 24,
        "temperature": 0,
    }
    response = submit(stack, body)
    assert response.status_code == 202, response.text
    job = wait_for(stack, response.json()["id"], timeout=120)
    assert job["status"] == "succeeded", job
    assert job["output_text"].strip(), job
    assert job["model"] == "smollm2-135m-instruct"
    timings = job["timings"]
    assert timings["decode_ms"] > 0 and timings["prefill_ms"] > 0 and timings["audit_ms"] >= 0

    records, _ = trail_records(stack, stack.url(job["trail"]["url"]), limit=100)
    decisions = [record["decision"] for record in records if record["kind"] == "decision"]
    pieces = [piece for decision in decisions for piece in decision["emitted_text"]]
    assert job["output_text"].strip()[:10] in "".join(pieces)
    for decision in decisions:
        assert decision["target"]["runtime"] == "llama.cpp"
        assert len(decision["target"]["sha256"]) == 64
        assert all("text" in drafted for drafted in decision["drafted"])
    code, report = verify_json(stack, "--job", job["id"])
    assert (code, report["ok"]) == (0, True), report


def test_a_broker_outage_is_a_503_and_the_job_is_failed_not_lost(postgres_stack, tmp_path):
    stack = postgres_stack
    # A second web server on the same database whose broker address has nothing listening.
    port = free_port()
    env = {**stack.env, "CELERY_BROKER_URL": "redis://127.0.0.1:9/0"}
    argv = [sys.executable, "-m", "gunicorn", "pathfinder_site.wsgi:application",
            "--bind", f"127.0.0.1:{port}", "--workers", "1"]  # fmt: skip
    web = start_process("gunicorn-no-broker", argv, env, tmp_path)
    try:
        wait_until_healthy(f"http://127.0.0.1:{port}", [web])
        body = {"prompt_token_ids": [1, 2], "request_id": "during-broker-outage"}
        response = requests.post(
            f"http://127.0.0.1:{port}/api/v1/generations",
            json=body,
            headers=auth(stack.api_key),
            timeout=60,
        )
    finally:
        stop_all([web])
    assert response.status_code == 503, response.text
    assert response.json()["error"]["code"] == "service_unavailable"

    # The job was stored and failed with the reason: asking again returns it, never a new one.
    again = submit(stack, body)
    assert again.status_code == 200, again.text
    job = again.json()
    assert job["status"] == "failed"
    assert "queue is unavailable" in job["error"]
    assert job["output_token_ids"] == []


def test_verify_all_walks_again_only_what_changed_since_its_verified_point(
    postgres_stack, tmp_path
):
    """After a run that found everything intact under a checkpoint, the next run walks no
    anchored trail again, yet a record rewritten or deleted since is walked and named."""
    stack = postgres_stack
    # The stack's commands sign and verify with a key of this test's (kept for the rest).
    stack.env["PATHFINDER_CHECKPOINT_KEY_FILE"] = str(tmp_path / "signing.key")
    stack.env["PATHFINDER_CHECKPOINT_PUBLISH_DIR"] = str(tmp_path / "published")
    jobs = []
    for seed in range(3):
        body = {"prompt_token_ids": [1, 2, 3], "max_tokens": 12, "temperature": 0, "seed": seed}
        response = submit(stack, body)
        assert response.status_code == 202, response.text
        jobs.append(wait_for(stack, response.json()["id"]))
    made = stack.manage(
        "shell", "-c", "from audit.keys import signing_key_create; signing_key_create()"
    )
    assert made.returncode == 0, describe(made)
    signed = stack.manage("checkpoint")
    assert signed.returncode == 0, describe(signed)

    code, first = verify_json(stack, "--all")
    assert code == 0, first
    code, second = verify_json(stack, "--all")
    assert code == 0, second
    assert second["records_covered"] == first["records_covered"] > 0
    # Every sealed trail is anchored and unchanged: only open ones (if any) are walked.
    assert second["records_checked"] < second["records_covered"] / 2, second
    assert any("incremental from verification run" in note for note in second["notes"])
    assert second["jobs_checked"] == first["jobs_checked"]  # job rows: every time

    trail_id = jobs[0]["trail"]["id"]
    tamper_as_superuser(stack.database_url, trail_id)
    code, tampered = verify_json(stack, "--all")
    assert code == 1 and {"trail": trail_id, "seq": 1} in [
        {"trail": f["trail"], "seq": f["seq"]} for f in tampered["failures"]
    ], tampered
    walked = tampered["records_checked"] - second["records_checked"]
    assert walked == jobs[0]["trail"]["records"], tampered  # that trail alone, again
    restore_as_superuser(stack.database_url, trail_id)

    deleted = delete_as_superuser(stack.database_url, jobs[1]["trail"]["id"])
    code, missing = verify_json(stack, "--all")
    assert code == 1 and any(
        f["trail"] == jobs[1]["trail"]["id"] and "missing" in f["reason"]
        for f in missing["failures"]
    ), missing
    reinsert_as_superuser(stack.database_url, deleted)
    code, mended = verify_json(stack, "--all", "--full")
    assert code == 0 and mended["records_checked"] == mended["records_covered"], mended


def _as_superuser(database_url: str, statement: str, params) -> list:
    with psycopg.connect(database_url) as conn, conn.transaction():
        before = conn.execute(TRIGGER_STATES).fetchall()
        conn.execute("ALTER TABLE audit_decisionrecord DISABLE TRIGGER ALL")
        rows = conn.execute(statement, params).fetchall()
        for name, state in before:
            mode = "ENABLE ALWAYS" if state == "A" else "ENABLE"
            conn.execute(
                sql.SQL("ALTER TABLE audit_decisionrecord {} TRIGGER {}").format(
                    sql.SQL(mode), sql.Identifier(name)
                )
            )
        assert conn.execute(TRIGGER_STATES).fetchall() == before
    return rows


def restore_as_superuser(database_url: str, trail_id: str) -> None:
    _as_superuser(
        database_url,
        "UPDATE audit_decisionrecord SET payload = replace(payload, '\"step\":9,', "
        "'\"step\":0,') WHERE trail_id = %s AND seq = 1 RETURNING id",
        (trail_id,),
    )


def delete_as_superuser(database_url: str, trail_id: str) -> tuple:
    (row,) = _as_superuser(
        database_url,
        "DELETE FROM audit_decisionrecord WHERE trail_id = %s AND seq = 2 "
        "RETURNING id, trail_id, seq, kind, payload, openings, prev_hash, record_hash, created_at",
        (trail_id,),
    )
    return row


def reinsert_as_superuser(database_url: str, row: tuple) -> None:
    _as_superuser(
        database_url,
        "INSERT INTO audit_decisionrecord (id, trail_id, seq, kind, payload, openings, "
        "prev_hash, record_hash, created_at) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s) "
        "RETURNING id",
        row,
    )


def test_verify_chain_names_a_tampered_record_and_exits_1(postgres_stack):
    """Runs last: it leaves the stack's audit chain broken on purpose."""
    stack = postgres_stack
    response = submit(stack, {"prompt_token_ids": [1, 2, 3], "max_tokens": 24, "temperature": 0})
    assert response.status_code == 202, response.text
    job = wait_for(stack, response.json()["id"])
    assert job["status"] == "succeeded", job
    assert job["trail"]["records"] >= 3, "the tampered record must sit in the middle"
    trail_id = job["trail"]["id"]

    tamper_as_superuser(stack.database_url, trail_id)

    checked = stack.manage("verify_chain", "--job", job["id"])
    assert checked.returncode == 1, describe(checked)
    assert f"trail {trail_id} seq 1" in checked.stdout, describe(checked)
    code, report = verify_json(stack, "--all")
    assert code == 1 and report["ok"] is False, report
    assert {"trail": trail_id, "seq": 1} in [
        {"trail": failure["trail"], "seq": failure["seq"]} for failure in report["failures"]
    ], report["failures"]


TRIGGER_STATES = sql.SQL(
    "SELECT tgname, tgenabled FROM pg_trigger "
    "WHERE tgrelid = 'audit_decisionrecord'::regclass AND NOT tgisinternal ORDER BY tgname"
)


def tamper_as_superuser(database_url: str, trail_id: str) -> None:
    """Rewrite record 1 (step 0's decision) the way a rogue superuser could: switch the
    append-only triggers off, edit, and switch them back on exactly as they were, all in one
    transaction."""
    with psycopg.connect(database_url) as conn, conn.transaction():
        before = conn.execute(TRIGGER_STATES).fetchall()
        assert ("audit_decisionrecord_no_change", "A") in before, before
        conn.execute("ALTER TABLE audit_decisionrecord DISABLE TRIGGER ALL")
        changed = conn.execute(
            "UPDATE audit_decisionrecord SET payload = replace(payload, '\"step\":0,', "
            "'\"step\":9,') WHERE trail_id = %s AND seq = 1 RETURNING payload",
            (trail_id,),
        ).fetchall()
        assert len(changed) == 1 and '"step":9,' in changed[0][0], changed
        conn.execute("ALTER TABLE audit_decisionrecord ENABLE TRIGGER ALL")
        # ENABLE ALWAYS takes one trigger name, not ALL; restore each ALWAYS trigger by name.
        for name, state in before:
            if state == "A":
                conn.execute(
                    sql.SQL("ALTER TABLE audit_decisionrecord ENABLE ALWAYS TRIGGER {}").format(
                        sql.Identifier(name)
                    )
                )
        assert conn.execute(TRIGGER_STATES).fetchall() == before

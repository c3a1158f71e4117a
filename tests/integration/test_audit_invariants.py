"""Invariants 1 and 2 on the real store: output holds only committed tokens; a store that cannot
commit fails the job closed."""

import json

import pytest
from django.core.management import call_command
from django.db import connection

from audit.models import DecisionRecord, LedgerEntry, Trail, VerificationRun
from audit.selectors import trail_clear_decisions, trail_decisions
from audit.verification import verify_trails
from decoding.worker.sinks import STEPS_PER_COMMIT


def emitted_by_records(trail_id) -> list[int]:
    return [
        token for record in trail_clear_decisions(trail_id=trail_id) for token in record["emitted"]
    ]


@pytest.mark.parametrize("temperature", [0.0, 0.9])
def test_the_output_is_exactly_the_tokens_of_committed_records(run_job, temperature):
    job = run_job(max_tokens=50, temperature=temperature, top_p=0.9)
    assert job.status == "succeeded"
    assert job.output_token_ids == emitted_by_records(job.trail_id)
    trail = Trail.objects.get(pk=job.trail_id)
    assert (trail.status, trail.outcome) == ("sealed", "succeeded")
    assert LedgerEntry.objects.filter(trail_id=trail.id).exists()
    assert verify_trails([trail.id], scope="test").ok


def test_eos_ends_the_output_with_the_eos_token(run_job):
    first = run_job(max_tokens=40)
    eos = first.output_token_ids[5]
    job = run_job(max_tokens=40, eos_token_id=eos)
    assert job.stop_reason == "eos"
    assert job.output_token_ids == first.output_token_ids[: first.output_token_ids.index(eos) + 1]
    assert job.output_token_ids == emitted_by_records(job.trail_id)


@pytest.fixture
def disk_full_in_the_second_batch():
    """A real PostgreSQL error on the audit insert path: the INSERT of record STEPS_PER_COMMIT + 1
    (after the request record and one batch of decisions) fails the way a full tablespace fails
    (SQLSTATE 53100), so the first batch of records is committed and the second is not. Rolled
    back with the test."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            CREATE FUNCTION pg_temp.disk_full() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                IF NEW.seq >= %s THEN
                    RAISE EXCEPTION 'could not extend file: No space left on device'
                        USING ERRCODE = 'disk_full';
                END IF;
                RETURN NEW;
            END $$;
            CREATE TRIGGER test_disk_full BEFORE INSERT ON audit_decisionrecord
                FOR EACH ROW EXECUTE FUNCTION pg_temp.disk_full();
            """,
            [STEPS_PER_COMMIT + 1],
        )


def test_a_store_that_cannot_commit_fails_the_job_closed(
    run_job, owner, disk_full_in_the_second_batch, caplog
):
    job = run_job(max_tokens=1000)
    assert job.status == "failed"
    assert (job.failure, job.error) == (
        "audit_unavailable",
        "audit store unavailable, no output released",
    )
    # The cause is the operator's, in the log with the job id; never the caller's.
    logged = [r for r in caplog.records if r.getMessage() == "job failed"]
    assert logged and logged[-1].job_id == str(job.id)
    assert "No space left on device" in logged[-1].cause
    assert job.output_token_ids == []
    # What was committed before the fault still verifies, and the API releases no text.
    assert trail_decisions(trail_id=job.trail_id).count() == STEPS_PER_COMMIT
    assert not DecisionRecord.objects.filter(trail_id=job.trail_id, kind="answer").exists()
    assert verify_trails([job.trail_id], scope="test").ok
    body = owner.api.get(f"/api/v1/generations/{job.id}").json()
    assert (body["status"], body["output_token_ids"]) == ("failed", [])
    assert (body["failure"], body["error"]) == (job.failure, job.error)
    assert "No space" not in str(body)


def test_records_committed_in_batches_chain_exactly_as_one_by_one(run_job):
    job = run_job(max_tokens=1000)
    assert job.steps > 2 * STEPS_PER_COMMIT  # three transactions, the last one partial
    records = list(DecisionRecord.objects.filter(trail_id=job.trail_id).order_by("seq"))
    trail = Trail.objects.get(pk=job.trail_id)
    # The request record, a decision per step, the answer record.
    assert [r.seq for r in records] == list(range(job.steps + 2))
    assert len(records) == trail.record_count
    assert [r.kind for r in records] == ["request"] + ["decision"] * job.steps + ["answer"]
    assert [r.prev_hash for r in records[1:]] == [r.record_hash for r in records[:-1]]
    assert trail.head_hash == records[-1].record_hash
    assert verify_trails([trail.id], scope="test").ok


def test_verify_chain_reports_intact_as_json_exits_0_and_records_its_run(run_job, capsys):
    job = run_job()
    call_command("verify_chain", "--job", str(job.id), "--json")
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] is True
    assert report["records_checked"] == job.steps + 2  # with the request and the answer
    assert report["jobs_checked"] == 1
    run = VerificationRun.objects.latest("id")
    assert (run.ok, run.scope) == (True, f"job {job.id}")

    call_command("verify_chain", "--all")
    assert "INTACT" in capsys.readouterr().out


def test_create_api_key_prints_a_working_key_alone_on_the_last_line(db, capsys, client):
    call_command("create_api_key", "--matter", "New Matter", "ingest")
    raw_key = capsys.readouterr().out.strip().splitlines()[-1]
    assert raw_key.startswith("pf_") and " " not in raw_key
    response = client.post(
        "/api/v1/generations",
        data={"prompt_token_ids": [1]},
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {raw_key}",
    )
    assert response.status_code == 202

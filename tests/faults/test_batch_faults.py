"""A batch whose worker is killed mid-batch (SIGKILL, as a machine lost), driven end to end by the
official `openai` client: every line ends answered once, in the output file, each answer exactly
its trail's committed tokens, and every trail verifies."""

from __future__ import annotations

import io
import json

import openai
import pytest

from tests.system.helpers import describe

from .stack import FaultStack
from .test_faults import MODEL, kill_worker, rows, wait_until

pytestmark = [pytest.mark.faults, pytest.mark.timeout(400)]

LINES = 12
# Held-out questions of the kind a review batch asks, each long enough to be killed mid-decode.
QUESTIONS = [
    "Is a clause that caps liability at fees paid responsive to a request about indemnity?",
    "Summarise the duties of a trustee in one paragraph.",
    "Does an email scheduling a meeting count as a privileged communication?",
    "List the elements of a breach of contract claim.",
]


def batch_input() -> bytes:
    lines = [
        {
            "custom_id": f"doc-{i:03d}",
            "method": "POST",
            "url": "/v1/completions",
            # No end-of-sequence token: each decodes its full length, long enough to be killed.
            "body": {
                "model": MODEL,
                "prompt": QUESTIONS[i % len(QUESTIONS)],
                "max_tokens": 96,
                "temperature": 0.7,
                "seed": i,
                "ignore_eos": True,
            },
        }  # fmt: skip
        for i in range(LINES)
    ]
    return "".join(json.dumps(line) + "\n" for line in lines).encode()


def a_running_batch_line(stack: FaultStack) -> tuple[str, str] | None:
    """(job id, host:pid of its worker) of a batch line's job that has committed records."""
    found = rows(
        stack,
        """SELECT j.id::text, j.worker FROM decoding_generationjob j
           JOIN decoding_batchline l ON l.job_id = j.id
           JOIN audit_trail t ON t.id = j.trail_id
           WHERE j.status = 'running' AND t.record_count > 0 LIMIT 1""",
    )
    return found[0] if found else None


def test_a_worker_killed_mid_batch_loses_no_line_and_runs_none_twice(fault_stack):
    stack = fault_stack
    client = openai.OpenAI(
        base_url=f"{stack.base_url}/v1", api_key=stack.api_key, max_retries=0, timeout=60
    )
    uploaded = client.files.create(file=("docs.jsonl", io.BytesIO(batch_input())), purpose="batch")
    batch = client.batches.create(
        input_file_id=uploaded.id, endpoint="/v1/completions", completion_window="24h"
    )
    assert batch.status == "validating"
    job_id, worker = wait_until(lambda: a_running_batch_line(stack), timeout=120)
    kill_worker(stack, worker)  # mid-decode, mid-batch

    def ended():
        """the batch ended"""
        found = client.batches.retrieve(batch.id)
        return found if found.status in ("completed", "failed", "expired", "cancelled") else None

    done = wait_until(ended, timeout=300, every=1)
    assert done.status == "completed", stack.log_tails()
    assert (done.request_counts.total, done.request_counts.completed) == (LINES, LINES)
    assert done.request_counts.failed == 0 and done.error_file_id is None
    text = client.files.content(done.output_file_id).text
    output = [json.loads(row) for row in text.splitlines()]
    assert sorted(row["custom_id"] for row in output) == [f"doc-{i:03d}" for i in range(LINES)]
    for row in output:
        body = row["response"]["body"]
        audit = body["pathfinder"]
        assert row["response"]["status_code"] == 200 and audit["status"] == "succeeded"
        (tokens, trail_id), *_ = rows(
            stack,
            "SELECT output_token_ids, trail_id::text FROM decoding_generationjob WHERE id = %s",
            audit["job_id"],
        )
        assert trail_id == audit["trail_id"] and len(tokens) == 96
        assert body["usage"]["completion_tokens"] == 96
    # The killed line ran again as a new attempt on a new trail, the first sealed abandoned; no
    # line became a second job.
    attempts = rows(
        stack, "SELECT outcome FROM audit_trail WHERE job_id = %s ORDER BY attempt", job_id
    )
    assert len(attempts) >= 2 and attempts[0][0] == "abandoned"
    assert attempts[-1][0] == "succeeded"
    (count,) = rows(stack, "SELECT count(*) FROM decoding_batchline")[0]
    (jobs,) = rows(stack, "SELECT count(*) FROM decoding_generationjob")[0]
    assert count == jobs == LINES
    verified = stack.manage("verify_chain", "--all", "--json", timeout=120)
    assert verified.returncode == 0 and json.loads(verified.stdout)["ok"], describe(verified)

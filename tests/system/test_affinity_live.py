"""Document affinity on the live stack (issue 42, item 3): two Celery workers consume their own
queues beside the shared one. Asked one at a time, every question of a document runs on the
worker its matter and document hash to, and the documents spread over both; asked at once, the
second question goes to the idle worker rather than wait behind the first. Read from each job's
attempt (`worker`, host:pid) in the stack's database."""

from __future__ import annotations

import random
from concurrent.futures import ThreadPoolExecutor

import psycopg
import pytest

from .helpers import Stack, submit, wait_for

pytestmark = [pytest.mark.system, pytest.mark.timeout(240)]

DOCUMENTS = 10
QUESTIONS = 3


def workers_of(stack: Stack, jobs: list[str]) -> list[str]:
    for job_id in jobs:
        assert wait_for(stack, job_id)["status"] == "succeeded"
    with psycopg.connect(stack.database_url) as connection:
        rows = connection.execute(
            "SELECT id::text, worker FROM decoding_generationjob WHERE id = ANY(%s::uuid[])",
            (jobs,),
        ).fetchall()
    worker = dict(rows)
    return [worker[job_id] for job_id in jobs]


def questions(rng: random.Random) -> list[dict]:
    text = [rng.randrange(1, 30) for _ in range(rng.randrange(70, 200))]
    return [{"prompt_token_ids": text + [q + 1] * (q + 2), "max_tokens": 3} for q in range(3)]


def test_a_documents_questions_run_on_its_worker_and_documents_spread(postgres_stack: Stack):
    rng = random.Random(42)
    ran_on = {}
    for document in range(DOCUMENTS):
        ran_on[document] = {
            worker
            for body in questions(rng)
            for worker in workers_of(postgres_stack, [submit(postgres_stack, body).json()["id"]])
        }
    assert all(len(workers) == 1 for workers in ran_on.values()), ran_on
    assert len(set().union(*ran_on.values())) == 2, ran_on  # both workers took documents


def test_questions_asked_at_once_never_leave_a_worker_idle(postgres_stack: Stack):
    bodies = questions(random.Random(43))
    with ThreadPoolExecutor(len(bodies)) as pool:
        jobs = list(pool.map(lambda body: submit(postgres_stack, body).json()["id"], bodies))
    assert len(set(workers_of(postgres_stack, jobs))) == 2

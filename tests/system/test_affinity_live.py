"""Document affinity on the live stack (issue 42, item 3): two Celery workers consume their own
queues beside the shared one, and every question of a document runs on the worker its matter
and document hash to, while the documents spread over both. Read from each job's attempt
(`worker`, host:pid) in the stack's database."""

from __future__ import annotations

import random
from concurrent.futures import ThreadPoolExecutor

import psycopg
import pytest

from .helpers import Stack, submit, wait_for

pytestmark = [pytest.mark.system, pytest.mark.timeout(240)]

DOCUMENTS = 10
QUESTIONS = 3


def test_a_documents_questions_run_on_one_worker_and_documents_spread(postgres_stack: Stack):
    stack = postgres_stack
    rng = random.Random(42)
    ran_on: dict[int, set[str]] = {}
    for document in range(DOCUMENTS):
        text = [rng.randrange(1, 30) for _ in range(rng.randrange(70, 200))]
        bodies = [
            {"prompt_token_ids": text + [q + 1] * (q + 2), "max_tokens": 3}
            for q in range(QUESTIONS)
        ]
        # A document's questions at once (a burst, as a review tool sends them); the next
        # document once they are done, so no worker's queue fills and spills to the shared one.
        with ThreadPoolExecutor(QUESTIONS) as pool:
            jobs = list(pool.map(lambda body: submit(stack, body).json()["id"], bodies))
        for job_id in jobs:
            assert wait_for(stack, job_id)["status"] == "succeeded"
        with psycopg.connect(stack.database_url) as connection:
            rows = connection.execute(
                "SELECT worker FROM decoding_generationjob WHERE id = ANY(%s)", (jobs,)
            ).fetchall()
        ran_on[document] = {worker for (worker,) in rows}
    assert all(len(workers) == 1 for workers in ran_on.values()), ran_on
    assert len(set().union(*ran_on.values())) == 2, ran_on  # both workers took documents

"""Lines that share a document go out together (issue 42, item 1), on the real PostgreSQL: a
shuffled file of documents x questions is fed a document at a time, one line a turn by default
and up to PATHFINDER_BATCH_DOCUMENT_LINES when it is raised, so the worker evaluates each
document once and decodes its questions in the same passes (that part:
tests/models/test_sequence_engine.py); the output stays in the file's order; lines of two matters
are never one turn."""

from __future__ import annotations

import json
import random
import uuid

import pytest

from decoding import batches
from decoding.models import GenerationJob
from decoding.worker.execution import job_run

from .test_batches import content, create, line, upload

DOCUMENTS = 3
QUESTIONS = 3


@pytest.fixture
def shuffled_file() -> tuple[list[str], dict[str, int]]:
    """Lines of DOCUMENTS documents of 80-200 tokens x QUESTIONS questions, shuffled, and the
    document of each custom_id."""
    rng = random.Random(11)
    documents = [[rng.randrange(1, 30) for _ in range(rng.randrange(80, 200))] for _ in range(3)]
    pairs = [(d, q) for d in range(DOCUMENTS) for q in range(QUESTIONS)]
    rng.shuffle(pairs)
    lines = [
        line(f"doc{d}-q{q}", prompt=documents[d] + [q + 1, q + 2], max_tokens=3) for d, q in pairs
    ]
    return lines, {f"doc{d}-q{q}": d for d, q in pairs}


def fed(owner, text, sent_jobs, capture) -> tuple[str, list[list[str]]]:
    """Run the batch as workers would, one feed's lines at a time: (batch id, the custom ids of
    each feed's lines)."""
    file_id = upload(owner, text).json()["id"]
    batch_id = create(owner, file_id).json()["id"]
    custom: dict[str, str] = {}
    with capture(execute=True):
        batches.batches_advance()
    sends = []
    while len(sent_jobs) > sum(map(len, sends)):
        turn = sent_jobs[sum(map(len, sends)) :]
        for job in GenerationJob.objects.filter(pk__in=turn).select_related("batch_line"):
            custom[str(job.pk)] = job.batch_line.custom_id
        sends.append([custom[job_id] for job_id in turn])
        for job_id in turn:
            job_run(job_id=job_id)
            with capture(execute=True):
                batches.job_ended(job_id)
    return batch_id, sends


def test_a_shuffled_files_lines_go_out_a_document_at_a_time(
    owner, settings, sent_jobs, shuffled_file, django_capture_on_commit_callbacks
):
    settings.PATHFINDER_BATCH_MAX_QUEUED = 1
    settings.PATHFINDER_BATCH_DOCUMENT_LINES = 4
    lines, document_of = shuffled_file
    batch_id, sends = fed(owner, "\n".join(lines), sent_jobs, django_capture_on_commit_callbacks)
    # Each send is one document's questions, all of them; every line went out once.
    assert [len(send) for send in sends] == [QUESTIONS] * DOCUMENTS, sends
    assert all(len({document_of[c] for c in send}) == 1 for send in sends), sends
    assert sorted(c for send in sends for c in send) == sorted(document_of)
    # The output file keeps the input's order.
    batch = owner.api.get(f"/v1/batches/{batch_id}").json()
    assert batch["status"] == "completed"
    rows = content(owner, batch["output_file_id"])
    assert [row["custom_id"] for row in rows] == [json.loads(text)["custom_id"] for text in lines]


@pytest.mark.parametrize("per_turn", [1, 2])  # 1: the default
def test_a_turn_takes_at_most_the_document_lines_and_a_document_stays_together(
    owner, settings, sent_jobs, shuffled_file, django_capture_on_commit_callbacks, per_turn
):
    settings.PATHFINDER_BATCH_MAX_QUEUED = 1
    settings.PATHFINDER_BATCH_DOCUMENT_LINES = per_turn
    lines, document_of = shuffled_file
    _, sends = fed(owner, "\n".join(lines), sent_jobs, django_capture_on_commit_callbacks)
    assert max(map(len, sends)) == per_turn
    order = [document_of[c] for send in sends for c in send]
    runs = [d for i, d in enumerate(order) if i == 0 or order[i - 1] != d]
    assert sorted(runs) == list(range(DOCUMENTS)), order  # each document's lines in one run


def test_lines_sharing_less_than_a_block_go_alone(
    owner, settings, sent_jobs, django_capture_on_commit_callbacks
):
    settings.PATHFINDER_BATCH_MAX_QUEUED = 1
    settings.PATHFINDER_BATCH_DOCUMENT_LINES = 4
    shared = [n % 31 + 1 for n in range(63)]  # 63 tokens: less than a block
    lines = [line(f"l{n}", prompt=shared + [10 + n] * 10, max_tokens=2) for n in range(3)]
    _, sends = fed(owner, "\n".join(lines), sent_jobs, django_capture_on_commit_callbacks)
    assert [len(send) for send in sends] == [1, 1, 1]


def test_two_matters_lines_over_one_document_are_never_one_turn(
    owner, outsider, settings, sent_jobs, shuffled_file, django_capture_on_commit_callbacks
):
    settings.PATHFINDER_BATCH_MAX_QUEUED = 2
    settings.PATHFINDER_BATCH_DOCUMENT_LINES = 4
    lines, _ = shuffled_file
    for app in (owner, outsider):
        create(app, upload(app, "\n".join(lines)).json()["id"])
    with django_capture_on_commit_callbacks(execute=True):
        batches.batches_advance()
    # Two turns (the cap): one of each matter, each a document's lines of its own batch.
    jobs = GenerationJob.objects.in_bulk(sent_jobs)
    matters = [jobs[uuid.UUID(job_id)].matter_id for job_id in sent_jobs]
    assert len(sent_jobs) == 2 * QUESTIONS
    assert matters[:QUESTIONS] == [matters[0]] * QUESTIONS
    assert matters[QUESTIONS:] == [matters[-1]] * QUESTIONS and matters[0] != matters[-1]

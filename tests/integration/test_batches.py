"""The Batch API (/v1/files, /v1/batches) on the real PostgreSQL: each line an ordinary job with
its own trail, a bad line refused in the endpoint's own words without sinking the batch, the
file limits refusing an upload whole, custom_id scoped to its batch, lines fed below every
interactive call and outside the matter's cap, resumption without a line made twice, cancel and
expiry. Jobs are decoded in this process as a worker would (the stub pair); the official client
against a live stack with a worker killed mid-batch is tests/system's."""

from __future__ import annotations

import datetime as dt
import io
import json
import subprocess
import zipfile
from pathlib import Path

import pytest
from django.db.models import Q
from django.utils import timezone

from audit.verification import verify_trails
from decoding import batches
from decoding.models import Batch, BatchFile, BatchLine, GenerationJob
from decoding.services import job_submit
from decoding.worker.execution import job_run

REPO = Path(__file__).resolve().parents[2]
CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
BODY = {"model": "stub", "max_tokens": 12, "temperature": 0, "seed": 3}


def line(custom_id, prompt=(17, 4, 9), url=COMPLETIONS, **body) -> str:
    """A completions line; the stub pair takes token ids."""
    request = {"custom_id": custom_id, "method": "POST", "url": url,
               "body": {**BODY, "prompt": list(prompt), **body}}  # fmt: skip
    return json.dumps(request)


def upload(app, text: str | bytes, purpose="batch", name="docs.jsonl"):
    data = text.encode() if isinstance(text, str) else text
    upload = io.BytesIO(data)
    upload.name = name
    return app.api.post("/v1/files", {"file": upload, "purpose": purpose}, format="multipart")


def create(app, file_id, endpoint=COMPLETIONS, **extra):
    body = {"input_file_id": file_id, "endpoint": endpoint, "completion_window": "24h", **extra}
    return app.api.post("/v1/batches", body, format="json")


def run_batch(app, lines: list[str], endpoint=COMPLETIONS) -> dict:
    """Upload, create, and do what the workers and beat do until the batch ends."""
    file_id = upload(app, "\n".join(lines) + "\n").json()["id"]
    batch_id = create(app, file_id, endpoint).json()["id"]
    run_to_end(batch_id)
    return app.api.get(f"/v1/batches/{batch_id}").json()


def run_to_end(batch_id: str) -> None:
    batches.batches_advance()
    for job_id in GenerationJob.objects.filter(
        batch_line__batch_id=batch_id, status=GenerationJob.Status.QUEUED
    ).values_list("pk", flat=True):
        job_run(job_id=job_id)
        batches.job_ended(job_id)
    batches.batches_advance()


def content(app, file_id) -> list[dict]:
    response = app.api.get(f"/v1/files/{file_id}/content")
    assert response.status_code == 200
    return [json.loads(row) for row in response.getvalue().decode().splitlines()]


def test_every_line_is_a_job_with_its_own_trail_and_the_output_is_openai_shaped(owner):
    done = run_batch(owner, [line("doc-1"), line("doc-2", prompt=(3, 1, 4, 1, 5))])
    assert done["status"] == "completed"
    assert done["request_counts"] == {"total": 2, "completed": 2, "failed": 0}
    assert done["error_file_id"] is None and done["completed_at"] >= done["created_at"]
    rows = content(owner, done["output_file_id"])
    assert [row["custom_id"] for row in rows] == ["doc-1", "doc-2"]
    for row in rows:
        assert row["response"]["status_code"] == 200 and row["error"] is None
        body, audit = row["response"]["body"], row["response"]["body"]["pathfinder"]
        job = GenerationJob.objects.get(pk=audit["job_id"])
        assert row["response"]["request_id"] == str(job.pk)
        assert body["object"] == "text_completion"
        assert body["choices"][0]["text"] == job.output_text
        assert body["usage"]["completion_tokens"] == len(job.output_token_ids)
        assert audit["trail_id"] == str(job.trail_id)
        assert verify_trails([job.trail_id], scope="test").ok
        assert job.batch_line.custom_id == row["custom_id"]


def test_a_chat_batch_answers_in_chat_shape(owner):
    body = {**BODY, "model": "smollm2-135m-instruct", "max_tokens": 3,
            "messages": [{"role": "user", "content": "Hi"}]}  # fmt: skip
    chat = json.dumps({"custom_id": "c", "method": "POST", "url": CHAT, "body": body})
    done = run_batch(owner, [chat], endpoint=CHAT)
    (row,) = content(owner, done["output_file_id"])
    assert row["response"]["body"]["object"] == "chat.completion"
    assert row["response"]["body"]["choices"][0]["message"]["role"] == "assistant"


# Bad lines, each next to the body the endpoint would get for it: the error file must carry the
# status and message the endpoint itself answers.
BAD_BODIES = [
    {**BODY, "prompt": [1, 2], "temperature": 3},
    {**BODY, "prompt": [1, 2], "logit_bias": {"7": 100}},
    {**BODY, "prompt": [1, 2], "n": 2},
    {**BODY, "prompt": [1, 2], "model": "gpt-4"},
    {**BODY, "prompt": [1, 99999]},
    {**BODY, "prompt": [1, 2], "max_tokens": 10**6},
    {**BODY, "prompt": "words, which the stub pair cannot take"},
    {**BODY},
]


def test_a_bad_line_goes_to_the_error_file_in_the_endpoints_words_and_the_batch_goes_on(owner):
    bad = [json.dumps({"custom_id": f"bad-{i}", "method": "POST", "url": COMPLETIONS, "body": b})
           for i, b in enumerate(BAD_BODIES)]  # fmt: skip
    malformed = ['{"custom_id": "broken", "method": ', "[1, 2]",
                 json.dumps({"custom_id": "get", "method": "GET", "url": COMPLETIONS, "body": {}}),
                 json.dumps({"custom_id": "other-url", "method": "POST", "url": CHAT,
                             "body": {"messages": []}}),
                 json.dumps({"custom_id": "extra", "method": "POST", "url": COMPLETIONS,
                             "body": BODY, "header": {}}),
                 json.dumps({"custom_id": "stream", "method": "POST", "url": COMPLETIONS,
                             "body": {**BODY, "prompt": [1], "stream": True}})]  # fmt: skip
    done = run_batch(owner, [line("good-1"), *bad, *malformed, line("good-2")])
    assert done["status"] == "completed"
    total = 2 + len(bad) + len(malformed)
    assert done["request_counts"] == {"total": total, "completed": 2, "failed": total - 2}
    assert [row["custom_id"] for row in content(owner, done["output_file_id"])] == [
        "good-1",
        "good-2",
    ]
    errors = content(owner, done["error_file_id"])
    by_id = {row["custom_id"]: row["response"] for row in errors}
    before = GenerationJob.objects.count()
    for i, body in enumerate(BAD_BODIES):
        direct = owner.api.post(COMPLETIONS, body, format="json")
        assert by_id[f"bad-{i}"]["status_code"] == direct.status_code
        assert by_id[f"bad-{i}"]["body"] == direct.json()
    assert GenerationJob.objects.count() == before  # the endpoint stored nothing either
    unnamed = [row for row in errors if row["custom_id"] is None]
    assert [row["response"]["body"]["error"]["param"] for row in unnamed] == ["body", "body"]
    assert "JSON parse error" in unnamed[0]["response"]["body"]["error"]["message"]
    assert by_id["get"]["body"]["error"]["param"] == "method"
    assert by_id["other-url"]["body"]["error"]["param"] == "url"
    assert by_id["extra"]["body"]["error"]["param"] == "header"
    assert by_id["stream"]["body"]["error"]["param"] == "stream"
    assert all(r["status_code"] == 400 for r in by_id.values())


def test_a_file_that_repeats_a_custom_id_is_refused_naming_both_lines(owner):
    response = upload(owner, "\n".join([line("a"), line("b"), line("a")]))
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["param"] == "file"
    assert "Line 3 repeats custom_id 'a' of line 1" in error["message"]
    assert not BatchFile.objects.exists()


def test_the_file_limits_refuse_the_upload_and_store_nothing(owner, settings):
    settings.PATHFINDER_BATCH_MAX_LINES = 3
    response = upload(owner, "\n".join(line(f"d{i}") for i in range(4)))
    assert response.status_code == 400 and response.json()["error"]["param"] == "file"
    assert "4 lines; the limit is 3" in response.json()["error"]["message"]
    settings.PATHFINDER_BATCH_MAX_FILE_BYTES = 300
    response = upload(owner, line("big", prompt=range(100)))
    assert response.status_code == 413 and response.json()["error"]["param"] == "file"
    for text, param in [
        (b"\xff\xfe not utf-8", "file"),
        ("\n \n", "file"),
    ]:
        response = upload(owner, text)
        assert (response.status_code, response.json()["error"]["param"]) == (400, param)
    response = upload(owner, line("x"), purpose="fine-tune")
    assert (response.status_code, response.json()["error"]["param"]) == (400, "purpose")
    assert not BatchFile.objects.exists()


@pytest.mark.parametrize(
    ("change", "param"),
    [
        ({"completion_window": "48h"}, "completion_window"),
        ({"endpoint": "/v1/embeddings"}, "endpoint"),
        ({"input_file_id": "file-nope"}, "input_file_id"),
        ({"metadata": {f"k{i}": "v" for i in range(17)}}, "metadata"),
        (
            {"output_expires_after": {"anchor": "created_at", "seconds": 3600}},
            "output_expires_after",
        ),
    ],
)
def test_a_batch_that_cannot_run_is_refused_naming_the_field(owner, change, param):
    file_id = upload(owner, line("a")).json()["id"]
    body = {"input_file_id": file_id, "endpoint": COMPLETIONS, "completion_window": "24h", **change}
    response = owner.api.post("/v1/batches", body, format="json")
    assert response.status_code == 400, response.json()
    assert response.json()["error"]["param"] == param
    assert not Batch.objects.exists()


def test_custom_id_is_scoped_to_its_batch(owner):
    job, _ = job_submit(matter=owner.key.matter, api_key=owner.key, model="stub",
                        prompt_token_ids=[1, 2], request_id="doc-1", max_tokens=4)  # fmt: skip
    first = run_batch(owner, [line("doc-1")])
    second = run_batch(owner, [line("doc-1")])
    assert first["request_counts"]["completed"] == second["request_counts"]["completed"] == 1
    ids = {
        content(owner, b["output_file_id"])[0]["response"]["request_id"] for b in (first, second)
    }
    assert len(ids) == 2 and str(job.pk) not in ids
    assert GenerationJob.objects.get(request_id="doc-1") == job


def test_files_and_batches_are_the_keys_matter_only(owner, outsider):
    file_id = upload(owner, line("a")).json()["id"]
    batch_id = create(owner, file_id).json()["id"]
    for path in (f"/v1/files/{file_id}", f"/v1/files/{file_id}/content",
                 f"/v1/batches/{batch_id}"):  # fmt: skip
        assert outsider.api.get(path).status_code == 404
    assert outsider.api.post(f"/v1/batches/{batch_id}/cancel").status_code == 404
    assert create(outsider, file_id).json()["error"]["param"] == "input_file_id"
    assert outsider.api.get("/v1/batches").json()["data"] == []


def test_lists_page_by_cursor_newest_first(owner):
    file_id = upload(owner, line("a")).json()["id"]
    made = [create(owner, file_id).json()["id"] for _ in range(5)]
    page = owner.api.get("/v1/batches?limit=2").json()
    assert [b["id"] for b in page["data"]] == made[::-1][:2] and page["has_more"]
    rest = owner.api.get(f"/v1/batches?limit=10&after={page['last_id']}").json()
    assert [b["id"] for b in rest["data"]] == made[::-1][2:] and not rest["has_more"]
    assert owner.api.get("/v1/batches?after=batch_nope").json()["error"]["param"] == "after"
    files = owner.api.get("/v1/files?purpose=batch").json()
    assert [f["id"] for f in files["data"]] == [file_id]


INTERACTIVE = {"model": "stub", "prompt_token_ids": [1, 2], "max_tokens": 4}


def test_batch_lines_meet_their_own_cap_never_the_matters(owner, settings, sent_jobs):
    settings.PATHFINDER_MATTER_MAX_QUEUED = 2
    settings.PATHFINDER_BATCH_MAX_QUEUED = 3
    file_id = upload(owner, "\n".join(line(f"d{i}") for i in range(8))).json()["id"]
    batch_id = create(owner, file_id).json()["id"]
    batches.batches_advance()
    assert BatchLine.objects.filter(batch_id=batch_id, job__isnull=False).count() == 8
    sent = GenerationJob.objects.filter(batch_line__isnull=False, enqueued_at__isnull=False)
    assert sent.count() == 3  # the batch cap, though 8 lines are queued
    # Interactive calls of the same matter are admitted up to their own cap, as if no batch ran.
    for _ in range(2):
        response = owner.api.post("/api/v1/generations", INTERACTIVE, format="json")
        assert response.status_code == 202, response.json()
    response = owner.api.post("/api/v1/generations", INTERACTIVE, format="json")
    assert response.status_code == 429  # the third meets PATHFINDER_MATTER_MAX_QUEUED, as ever
    # While an interactive job is queued no further line is sent, even with room under the cap.
    first = sent.first()
    job_run(job_id=first.pk)
    batches.job_ended(first.pk)
    assert sent.count() == 3
    for job in GenerationJob.objects.filter(batch_line__isnull=True):
        job_run(job_id=job.pk)
    batches.batches_feed()
    assert sent.exclude(status__in=GenerationJob.FINISHED).count() == 3


def test_an_interactive_jobs_end_sends_the_line_its_queueing_held_off(owner, settings, sent_jobs):
    settings.PATHFINDER_BATCH_MAX_QUEUED = 1
    file_id = upload(owner, "\n".join(line(f"d{i}") for i in range(3))).json()["id"]
    batch_id = create(owner, file_id).json()["id"]
    batches.batches_advance()
    lines = GenerationJob.objects.filter(batch_line__batch_id=batch_id).order_by("batch_line__line")

    def sent() -> list[bool]:
        return [enqueued is not None for enqueued in lines.values_list("enqueued_at", flat=True)]

    assert sent() == [True, False, False]
    job, _ = job_submit(matter=owner.key.matter, api_key=owner.key, **INTERACTIVE)
    first = lines.first().pk
    job_run(job_id=first)
    batches.job_ended(first)  # an interactive job is queued: no line goes out
    assert sent() == [True, False, False]
    job_run(job_id=job.pk)
    batches.job_ended(job.pk)  # its end is the feed's next chance, not beat's tick
    assert sent() == [True, True, False]


def test_a_line_goes_out_behind_its_own_matters_calls(
    owner, sent_jobs, django_capture_on_commit_callbacks
):
    file_id = upload(owner, line("a")).json()["id"]
    create(owner, file_id)
    with django_capture_on_commit_callbacks(execute=True):
        batches.batches_advance()
        job, _ = job_submit(matter=owner.key.matter, api_key=owner.key, **INTERACTIVE)
    line_job = BatchLine.objects.get().job
    priorities = dict(zip(sent_jobs, sent_jobs.priorities, strict=True))
    assert priorities[str(job.pk)] < priorities[str(line_job.pk)]


def test_another_matters_sustained_calls_never_hold_a_sent_line_back_for_good(
    owner, outsider, sent_jobs, django_capture_on_commit_callbacks
):
    """Issue 41, item 4: between matters, fair share. One matter keeping a dozen calls queued
    sends each new one behind its backlog; another matter's line goes in at that matter's own
    place (its next job), so the queue, which takes the lowest number first and in order within
    a number, serves the line before every call the busy matter sends after it. Before: the
    line took the last place of all, behind every call that would ever come."""
    with django_capture_on_commit_callbacks(execute=True):
        for _ in range(12):
            job_submit(matter=outsider.key.matter, api_key=outsider.key, **INTERACTIVE)
        create(owner, upload(owner, line("a")).json()["id"])
        batches.batches_advance()
        later = [
            job_submit(matter=outsider.key.matter, api_key=outsider.key, **INTERACTIVE)[0]
            for _ in range(5)
        ]
    priorities = dict(zip(sent_jobs, sent_jobs.priorities, strict=True))
    ours = priorities[str(BatchLine.objects.get().job_id)]
    assert all(ours < priorities[str(job.pk)] for job in later), (ours, priorities)


def test_a_workers_pass_holds_a_line_back_for_an_interactive_job_but_not_the_reverse(
    owner, monkeypatch
):
    """The stub pair decodes without a sequence engine, so this checks what each job asks of the
    worker's slot; the engine's holding back is tests/models/test_sequence_engine.py's."""
    from decoding.worker import runtime

    asked = {}
    sequence = runtime.LoadedModels.sequence

    def recording(models, *, wall, background=False):
        asked[current] = (wall, background)
        return sequence(models, wall=wall, background=background)

    monkeypatch.setattr(runtime.LoadedModels, "sequence", recording)
    file_id = upload(owner, line("a")).json()["id"]
    create(owner, file_id)
    batches.batches_advance()
    current = BatchLine.objects.get().job_id
    job_run(job_id=current)
    job, _ = job_submit(matter=owner.key.matter, api_key=owner.key, **INTERACTIVE)
    current = job.pk
    job_run(job_id=current)
    matter = owner.key.matter_id  # each behind its matter's wall (docs/adr/0024)
    assert asked == {BatchLine.objects.get().job_id: (matter, True), job.pk: (matter, False)}


def test_expansion_resumes_where_it_stopped_and_makes_no_line_twice(owner, monkeypatch):
    monkeypatch.setattr(batches, "_CHUNK", 3)
    file_id = upload(owner, "\n".join(line(f"d{i}") for i in range(10))).json()["id"]
    batch_id = create(owner, file_id).json()["id"]
    # A worker that dies after its first chunk: the budget runs out after one transaction.
    batches._expand(batch_id, deadline=0)
    assert Batch.objects.get(pk=batch_id).lines_expanded == 3
    assert Batch.objects.get(pk=batch_id).status == "validating"
    batches.batches_advance()
    batches.batches_advance()  # a second delivery of the same work
    lines = BatchLine.objects.filter(batch_id=batch_id)
    assert sorted(lines.values_list("line", flat=True)) == list(range(1, 11))
    assert GenerationJob.objects.filter(batch_line__batch_id=batch_id).count() == 10
    assert Batch.objects.get(pk=batch_id).status == "in_progress"


def test_cancel_stops_the_queued_lines_and_ends_with_the_files_of_what_finished(owner):
    file_id = upload(owner, "\n".join(line(f"d{i}") for i in range(4))).json()["id"]
    batch_id = create(owner, file_id).json()["id"]
    batches.batches_advance()
    first = BatchLine.objects.get(batch_id=batch_id, line=1).job
    job_run(job_id=first.pk)
    cancelling = owner.api.post(f"/v1/batches/{batch_id}/cancel").json()
    assert cancelling["status"] == "cancelling" and cancelling["cancelling_at"]
    batches.batches_advance()
    done = owner.api.get(f"/v1/batches/{batch_id}").json()
    assert done["status"] == "cancelled" and done["cancelled_at"]
    assert done["request_counts"] == {"total": 4, "completed": 1, "failed": 3}
    # The desk says what OpenAI's counts lump as failed: these three were cancelled.
    batch = Batch.objects.get(pk=batch_id)
    assert batches.line_outcomes(batch) == {
        "completed": 1, "refused": 0, "failed": 0, "cancelled": 3
    }  # fmt: skip
    assert [r["custom_id"] for r in content(owner, done["output_file_id"])] == ["d0"]
    errors = content(owner, done["error_file_id"])
    assert {r["error"]["code"] for r in errors} == {"batch_cancelled"}
    assert all(r["response"] is None for r in errors)
    again = owner.api.post(f"/v1/batches/{batch_id}/cancel")
    assert again.status_code == 409 and again.json()["error"]["type"] == "conflict_error"
    assert GenerationJob.objects.filter(status="queued").count() == 0


def test_cancel_stops_a_large_batchs_unsent_lines_at_once_and_its_sent_ones_singly(
    owner, settings, sent_jobs
):
    settings.PATHFINDER_BATCH_MAX_QUEUED = 2
    file_id = upload(owner, "\n".join(line(f"d{i}") for i in range(30))).json()["id"]
    batch_id = create(owner, file_id).json()["id"]
    batches.batches_advance()
    lines = GenerationJob.objects.filter(batch_line__batch_id=batch_id)
    assert lines.filter(enqueued_at__isnull=False).count() == 2
    owner.api.post(f"/v1/batches/{batch_id}/cancel")
    assert batches.batches_advance()["stopped"] == 30
    done = owner.api.get(f"/v1/batches/{batch_id}").json()
    assert done["status"] == "cancelled"
    assert done["request_counts"] == {"total": 30, "completed": 0, "failed": 30}
    assert set(lines.values_list("status", flat=True)) == {"cancelled"}
    assert not lines.filter(Q(cancel_requested_at=None) | Q(finished_at=None)).exists()
    assert len(content(owner, done["error_file_id"])) == 30
    for job_id in sent_jobs:  # a sent line delivered after its cancel does not run
        job_run(job_id=job_id)
    assert set(lines.values_list("status", flat=True)) == {"cancelled"}


def test_a_cancel_that_lands_while_an_advance_runs_ends_the_batch_in_that_advance(
    owner, sent_jobs, monkeypatch
):
    """Its kick finds the advance's lease held; the advance runs once more rather than leaving
    the batch cancelling until beat's next tick (a stack without beat: forever)."""
    from decoding import tasks

    file_id = upload(owner, "\n".join(line(f"d{i}") for i in range(6))).json()["id"]
    batch_id = create(owner, file_id).json()["id"]
    feed = batches.batches_feed

    def cancel_mid_advance():
        if Batch.objects.get(pk=batch_id).status == Batch.Status.IN_PROGRESS:
            owner.api.post(f"/v1/batches/{batch_id}/cancel")
            assert tasks.advance_batches() is None  # the cancel's kick: the lease is held
        return feed()

    monkeypatch.setattr(batches, "batches_feed", cancel_mid_advance)
    tasks.advance_batches()
    assert Batch.objects.get(pk=batch_id).status == Batch.Status.CANCELLED


def test_a_file_no_batch_names_can_be_deleted_and_a_batchs_files_are_kept(owner, outsider):
    spare = upload(owner, line("a")).json()["id"]
    assert outsider.api.delete(f"/v1/files/{spare}").status_code == 404
    deleted = owner.api.delete(f"/v1/files/{spare}")
    assert deleted.json() == {"id": spare, "object": "file", "deleted": True}
    assert owner.api.get(f"/v1/files/{spare}").status_code == 404
    assert owner.api.delete(f"/v1/files/{spare}").status_code == 404
    done = run_batch(owner, [line("a")])
    for kept in (done["input_file_id"], done["output_file_id"]):
        refused = owner.api.delete(f"/v1/files/{kept}")
        assert refused.status_code == 409, refused.json()
        assert done["id"] in refused.json()["error"]["message"]
        assert owner.api.get(f"/v1/files/{kept}/content").status_code == 200


def test_a_batch_past_its_window_expires_with_its_unrun_lines_in_the_error_file(owner):
    file_id = upload(owner, "\n".join(line(f"d{i}") for i in range(3))).json()["id"]
    batch_id = create(owner, file_id).json()["id"]
    batches.batches_advance()
    first = BatchLine.objects.get(batch_id=batch_id, line=1).job
    job_run(job_id=first.pk)
    Batch.objects.filter(pk=batch_id).update(expires_at=timezone.now() - dt.timedelta(seconds=1))
    batches.batches_advance()
    done = owner.api.get(f"/v1/batches/{batch_id}").json()
    assert done["status"] == "expired" and done["expired_at"]
    assert done["request_counts"] == {"total": 3, "completed": 1, "failed": 2}
    assert {r["error"]["code"] for r in content(owner, done["error_file_id"])} == {"batch_expired"}


def test_reading_needs_read_and_writing_needs_generate(owner, db):
    from tests.cast import application

    reader = application("Doe v. Roe", "reader")
    reader.key.scopes = ["read"]
    reader.key.save()
    assert upload(reader, line("a")).status_code == 403
    file_id = upload(owner, line("a")).json()["id"]
    assert reader.api.delete(f"/v1/files/{file_id}").status_code == 403
    assert reader.api.get("/v1/batches").status_code == 200


# --- The desk: a reviewer follows a batch and produces it as one matter bundle ----------------


def test_the_desk_lists_a_batch_with_its_progress_and_links_each_line_to_its_trail(owner):
    from tests.cast import grant, logged_in

    reviewer = logged_in(grant("rita", "Doe v. Roe"))
    text = "\n".join([line("d0"), line("d1"), "not json"])
    file_id = upload(owner, text, name="privilege-log.jsonl").json()["id"]
    batch_id = create(owner, file_id, metadata={"matter_ref": "2026-cv-0412"}).json()["id"]
    batches.batches_advance()
    first = BatchLine.objects.get(batch_id=batch_id, line=1).job
    job_run(job_id=first.pk)
    page = reviewer.get("/portal/batches/").content.decode()
    assert batch_id in page and 'value="2" max="3"' in page  # one answered, one refused, of 3
    assert "privilege-log.jsonl" in page and "matter_ref: 2026-cv-0412" in page
    # The refused line by name, not lumped with failed jobs (OpenAI's request_counts lump them).
    assert "1 answered" in page and "1 refused" in page and "0 failed" in page
    detail = reviewer.get(f"/portal/batches/{batch_id}/").content.decode()
    assert f'href="/portal/jobs/{first.pk}/"' in detail
    assert "refused (400)" in detail and "JSON parse error" in detail
    walk = reviewer.get(f"/portal/jobs/{first.pk}/")
    assert walk.status_code == 200
    assert 'id="batch-line"' in walk.content.decode() and batch_id in walk.content.decode()
    trails = reviewer.get("/portal/").content.decode()  # the line's custom_id, linked to its batch
    custom_id = BatchLine.objects.get(batch_id=batch_id, line=1).custom_id
    assert f'title="batch {batch_id}, line 1">{custom_id}</a>' in trails


def test_a_reviewer_of_another_matter_sees_no_batch_of_this_one(owner):
    from tests.cast import grant, logged_in

    stranger = logged_in(grant("otto", "Other v. Matter"))
    batch_id = create(owner, upload(owner, line("a")).json()["id"]).json()["id"]
    assert batch_id not in stranger.get("/portal/batches/").content.decode()
    assert stranger.get(f"/portal/batches/{batch_id}/").status_code == 404
    assert stranger.post(f"/portal/batches/{batch_id}/export").status_code == 404


def test_a_batch_is_produced_as_one_matter_bundle_that_verifies_offline(owner, beat, run_job):
    from audit.evidence.bundle_format import MATTER
    from audit.evidence.offline_verify import verify_bundle
    from audit.keys import signing_key
    from reviewers.models import CustodyEvent
    from tests.cast import grant, logged_in

    reviewer = logged_in(grant("rita", "Doe v. Roe"))
    outside = run_job()  # the matter's own job, not a line of the batch
    done = run_batch(owner, [line("d0"), line("d1", prompt=(8, 8))])
    beat()
    response = reviewer.post(f"/portal/batches/{done['id']}/export")
    assert response.status_code == 200, response.content[:300]
    data = b"".join(response.streaming_content)
    assert verify_bundle(data, keys=[signing_key().verifier]) == []
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        doc = json.loads(archive.read(MATTER))
    lines = GenerationJob.objects.filter(batch_line__batch_id=done["id"])
    assert {t["trail_id"] for t in doc["trails"]} == {str(j.trail_id) for j in lines}
    (left,) = doc["left_out"]
    assert (left["trail_id"], left["reason"]) == (str(outside.trail_id), "outside_selection")
    assert doc["batch"] == done["id"]
    detail = json.loads(CustodyEvent.objects.get(action="export_matter").detail)
    assert detail["batch"] == done["id"] and detail["sha256"] == response["X-Content-SHA256"]


def test_verifier_output_names_each_line_by_its_custom_id_and_the_row_is_held_to_it(
    owner, beat, tmp_path, capsys
):
    """An examiner reads a batch's bundle by the caller's labels, not our UUIDs: each trail's
    request record names its line, both verifiers print it, and a relabelled row is caught."""
    from audit.evidence import offline_verify
    from audit.keys import signing_key
    from tests.cast import grant, logged_in

    done = run_batch(owner, [line("memo-7"), line("exhibit-B", prompt=(8, 8))])
    beat()
    reviewer = logged_in(grant("rita", "Doe v. Roe"))
    response = reviewer.post(f"/portal/batches/{done['id']}/export")
    bundle = tmp_path / "batch.zip"
    bundle.write_bytes(b"".join(response.streaming_content))
    assert offline_verify.main([str(bundle), "--key", signing_key().verifier]) == 0
    printed = capsys.readouterr().out
    pins = tmp_path / "pins.json"
    pins.write_text(json.dumps({"logKeys": [signing_key().verifier]}))
    page = subprocess.run(
        ["node", str(REPO / "tests/js/verify_bundle.cjs"), str(bundle), str(pins)],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    details = {c["name"]: c["detail"] for c in json.loads(page.stdout)["checks"] if c["ok"]}
    for number, custom_id in ((1, "memo-7"), (2, "exhibit-B")):
        job = GenerationJob.objects.get(batch_line__batch_id=done["id"], batch_line__line=number)
        named = f'its request record names it custom_id "{custom_id}", line {number} of batch '
        named += done["id"]
        check = f"trail {job.trail_id}: records and chain"
        (said,) = [row for row in printed.splitlines() if row.startswith(f"OK    {check}: ")]
        assert said.endswith(named), said
        assert details[check].endswith(named), details[check]  # the portal's verifier
    # The desk shows the row's label; relabelling it after the fact breaks verification.
    BatchLine.objects.filter(batch_id=done["id"], line=2).update(custom_id="exhibit-C")
    job = GenerationJob.objects.get(batch_line__batch_id=done["id"], batch_line__line=2)
    report = verify_trails([job.trail_id], scope="test")
    assert not report.ok
    assert any("batch line" in str(failure) for failure in report.failures), report.failures


def test_another_matters_queued_calls_never_hold_a_batch_at_zero_lines(
    owner, outsider, settings, sent_jobs
):
    """The outside check's probe: one matter's dozen queued interactive calls kept another
    matter's 5-line batch at 0 lines sent for 45 s (and could until its expiry). Interactive
    first within a matter; between matters, the queue's priorities and the worker's passes."""
    settings.PATHFINDER_BATCH_MAX_QUEUED = 8
    for _ in range(12):
        job_submit(matter=outsider.key.matter, api_key=outsider.key, **INTERACTIVE)
    file_id = upload(owner, "\n".join(line(f"d{i}") for i in range(5))).json()["id"]
    batch_id = create(owner, file_id).json()["id"]
    batches.batches_advance()
    ours = GenerationJob.objects.filter(batch_line__batch_id=batch_id)
    assert ours.filter(enqueued_at__isnull=False).count() == 5
    # A call of the batch's own matter does hold its next lines back.
    file_id = upload(owner, "\n".join(line(f"e{i}") for i in range(2))).json()["id"]
    second = create(owner, file_id).json()["id"]
    job_submit(matter=owner.key.matter, api_key=owner.key, **INTERACTIVE)
    batches.batches_advance()
    held = GenerationJob.objects.filter(batch_line__batch_id=second)
    assert held.count() == 2 and not held.filter(enqueued_at__isnull=False).exists()

"""One bad batch line hurts no one (issue 41, item 2), on the real PostgreSQL.

The outside check's seven poison lines, each of which made `batches_advance` raise on every tick
and so stopped the Batch API for every matter: a custom_id too long to store, a NUL or an
unpaired surrogate in the custom_id, in an unknown field's name or in the prompt. Here each sits
between good lines of one matter's batch while another matter runs a batch of its own and
cancels a third: every poison line must end as a refusal in the error file carrying its line
number (and in the batch's `errors.data[].line`, as OpenAI numbers them), the good lines
answered, and the other matter's batches unharmed. A file saved with a UTF-8 byte-order mark
(Notepad, PowerShell 5) keeps its first line.
"""

from __future__ import annotations

import json

import pytest

from decoding import batches
from decoding.models import Batch, BatchLine

from .test_batches import BODY, COMPLETIONS, content, create, line, run_to_end, upload

ENVELOPE = {"method": "POST", "url": COMPLETIONS}


GOOD_BODY = json.dumps({**BODY, "prompt": [1, 2]})

# Each line as written in the file: its JSON escapes (\u0000, \ud800) decode to the NUL or the
# unpaired surrogate only when the line is parsed.
POISON = {
    "a 600-character custom_id": (
        json.dumps({"custom_id": "x" * 600, **ENVELOPE, "body": {**BODY, "prompt": [1, 2]}})
    ),
    "a NUL in the custom_id": (
        '{"custom_id": "a\\u0000b", "method": "POST", "url": "/v1/completions", "body": '
        + GOOD_BODY
        + "}"
    ),
    "an unpaired surrogate in the custom_id": (
        '{"custom_id": "a\\ud800b", "method": "POST", "url": "/v1/completions", "body": '
        + GOOD_BODY
        + "}"
    ),
    "a NUL in an unknown field's name": (
        '{"custom_id": "f1", "x\\u0000y": 1, "method": "POST", "url": "/v1/completions", "body": '
        + GOOD_BODY
        + "}"
    ),
    "an unpaired surrogate in an unknown field's name": (
        '{"custom_id": "f2", "x\\udfffy": 1, "method": "POST", "url": "/v1/completions", "body": '
        + GOOD_BODY
        + "}"
    ),
    "a NUL in the prompt": (
        '{"custom_id": "p1", "method": "POST", "url": "/v1/completions", "body": '
        '{"model": "stub", "max_tokens": 4, "prompt": "Tenant\\u0000shall"}}'
    ),
    "an unpaired surrogate in the prompt": (
        '{"custom_id": "p2", "method": "POST", "url": "/v1/completions", "body": '
        '{"model": "stub", "max_tokens": 4, "prompt": "Tenant\\ud800shall"}}'
    ),
}


def advance_until_ended(*batch_ids: str, rounds: int = 8) -> None:
    """What beat and the workers do, a few rounds: no round may raise."""
    for _ in range(rounds):
        batches.batches_advance()
        for batch_id in batch_ids:
            run_to_end(batch_id)
        if all(Batch.objects.get(pk=b).status in ("completed", "cancelled", "expired", "failed")
               for b in batch_ids):  # fmt: skip
            return


@pytest.mark.parametrize("name", list(POISON))
def test_a_poison_line_is_refused_with_its_line_number_and_harms_no_one(name, owner, outsider):
    text = "\n".join([line("good-1"), POISON[name], line("good-3", prompt=(8, 8))]) + "\n"
    uploaded = upload(owner, text.encode())
    assert uploaded.status_code in (200, 400), uploaded.content
    if uploaded.status_code == 400:  # refused whole at upload, naming the line: also harmless
        assert "line 2" in uploaded.json()["error"]["message"]
        return
    ours = create(owner, uploaded.json()["id"]).json()["id"]
    theirs = create(outsider, upload(outsider, line("theirs") + "\n").json()["id"]).json()["id"]
    cancelled = create(outsider, upload(outsider, line("later") + "\n").json()["id"]).json()["id"]
    assert outsider.api.post(f"/v1/batches/{cancelled}/cancel").status_code == 200

    advance_until_ended(ours, theirs, cancelled)

    assert Batch.objects.get(pk=theirs).status == "completed"
    assert Batch.objects.get(pk=cancelled).status == "cancelled"
    done = owner.api.get(f"/v1/batches/{ours}").json()
    assert done["status"] == "completed", done
    assert done["request_counts"] == {"total": 3, "completed": 2, "failed": 1}
    (refused,) = content(owner, done["error_file_id"])
    assert refused["id"].endswith("_2") and refused["response"]["status_code"] == 400
    message = refused["response"]["body"]["error"]["message"]
    assert "\x00" not in json.dumps(refused) and "\\u0000" not in json.dumps(refused)
    assert message
    (error,) = done["errors"]["data"]
    assert error["line"] == 2 and error["code"] == refused["response"]["body"]["error"]["code"]
    answered = {row["custom_id"] for row in content(owner, done["output_file_id"])}
    assert answered == {"good-1", "good-3"}
    stored = BatchLine.objects.get(batch_id=ours, line=2)
    assert stored.job is None and stored.refusal is not None


def test_a_byte_order_mark_keeps_the_first_line(owner):
    text = "\ufeff" + line("first") + "\n" + line("second", prompt=(8, 8)) + "\n"
    batch_id = create(owner, upload(owner, text.encode("utf-8")).json()["id"]).json()["id"]
    advance_until_ended(batch_id)
    done = owner.api.get(f"/v1/batches/{batch_id}").json()
    answered = {row["custom_id"] for row in content(owner, done["output_file_id"])}
    assert answered == {"first", "second"} and done["error_file_id"] is None


@pytest.mark.parametrize("where", ["making its lines", "closing it"])
def test_a_batch_that_faults_anyway_fails_alone_with_a_reason(where, owner, outsider, monkeypatch):
    """A fault no line check foresaw (the store refusing a write of that batch's): its batch
    ends `failed`, naming the fault in `errors`, and the other matter's batch completes."""
    from django.db import DataError

    ours = create(owner, upload(owner, line("a") + "\n" + line("b") + "\n").json()["id"]).json()
    theirs = create(outsider, upload(outsider, line("theirs") + "\n").json()["id"]).json()["id"]
    ours = ours["id"]
    step = "_line_create" if where == "making its lines" else "_output_fields"
    real = getattr(batches, step)

    def refused_for_ours(batch, *args):
        if batch.pk == ours:
            raise DataError("the store refused this batch's write")
        return real(batch, *args)

    monkeypatch.setattr(batches, step, refused_for_ours)
    advance_until_ended(ours, theirs)

    assert Batch.objects.get(pk=theirs).status == "completed"
    done = owner.api.get(f"/v1/batches/{ours}").json()
    assert done["status"] == "failed" and done["failed_at"] is not None, done
    (error,) = done["errors"]["data"]
    assert error["code"] == "batch_failed" and "DataError" in error["message"]
    assert "refused this batch" not in error["message"]  # the cause is the operator's log's


@pytest.mark.parametrize("ending", ["cancelled", "expired"])
def test_a_batch_ended_while_validating_accounts_for_every_line(ending, owner):
    """Ended after its first chunk of lines was read: the lines it never read are in the error
    file too, so every custom_id is in exactly one file."""
    from datetime import timedelta

    from django.utils import timezone

    ids = [f"doc-{n:03d}" for n in range(250)]
    text = "".join(line(custom_id) + "\n" for custom_id in ids)
    batch_id = create(owner, upload(owner, text).json()["id"]).json()["id"]
    batches.batches_advance(budget_s=0)  # one chunk of lines read, then the budget is spent
    assert 0 < Batch.objects.get(pk=batch_id).lines_expanded < len(ids)
    if ending == "cancelled":
        assert owner.api.post(f"/v1/batches/{batch_id}/cancel").status_code == 200
    else:
        Batch.objects.filter(pk=batch_id).update(expires_at=timezone.now() - timedelta(seconds=1))
    for _ in range(4):
        batches.batches_advance(budget_s=0)
    done = owner.api.get(f"/v1/batches/{batch_id}").json()
    assert done["status"] == ending
    output = [row["custom_id"] for row in content(owner, done["output_file_id"])] if done[
        "output_file_id"] else []  # fmt: skip
    errors = content(owner, done["error_file_id"])
    assert sorted(output + [row["custom_id"] for row in errors]) == ids
    never = [row for row in errors if "never read" in row["error"]["message"]]
    assert never and all(row["error"]["code"] == f"batch_{ending}" for row in never)

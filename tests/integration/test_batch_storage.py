"""Batch files in bounded memory and bounded per matter (issue 41, items 3 and 5), on the real
PostgreSQL: a file is kept in parts and read back byte for byte, whatever its lines' lengths
against the parts' edges; a matter's files stop at PATHFINDER_MATTER_STORAGE_BYTES with a 413
naming it; a batch's close reads its lines a page at a time, a fixed number of queries a page,
whatever the batch's size. (A create racing a delete of its file: tests/system/test_batch_races.py,
which needs two connections.)"""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from decoding import batch_files, batches
from decoding.models import Batch, BatchFile, BatchFilePart, GenerationJob
from decoding.worker.execution import job_run

from .test_batches import content, create, line, run_to_end, upload


def test_a_file_longer_than_a_part_is_stored_in_parts_and_read_back_whole(owner, monkeypatch):
    monkeypatch.setattr(batch_files, "PART_BYTES", 1000)  # many edges, each line across some
    lines = [line(f"doc-{n}", prompt=(n % 31 + 1,) * (n % 40 + 1)) for n in range(60)]
    data = ("\ufeff" + "\n".join(lines) + "\n").encode()  # a BOM, as Notepad saves it
    answer = upload(owner, data)
    assert answer.status_code == 200, answer.content
    stored = BatchFile.objects.get(pk=answer.json()["id"])
    assert stored.line_count == 60 and stored.bytes == len(data)
    assert BatchFilePart.objects.filter(file=stored).count() == -(-len(data) // 1000)
    assert owner.api.get(f"/v1/files/{stored.pk}/content").getvalue() == data
    batch_id = create(owner, stored.pk).json()["id"]
    run_to_end(batch_id)
    batch = owner.api.get(f"/v1/batches/{batch_id}").json()
    assert batch["request_counts"] == {"total": 60, "completed": 60, "failed": 0}
    assert [row["custom_id"] for row in content(owner, batch["output_file_id"])] == [
        f"doc-{n}" for n in range(60)
    ]


@pytest.mark.parametrize("offset", [0, 999, 1000, 1001, 2500])
def test_bytes_that_are_not_utf8_are_named_at_their_offset_in_the_whole_file(
    owner, monkeypatch, offset
):
    monkeypatch.setattr(batch_files, "PART_BYTES", 1000)
    text = bytearray(("\n".join(line(f"d{n}") for n in range(40)) + "\n").encode())
    text[offset] = 0xFF
    answer = upload(owner, bytes(text))
    assert answer.status_code == 400
    assert f"(byte {offset})" in answer.json()["error"]["message"]
    assert not BatchFile.objects.exists() and not BatchFilePart.objects.exists()


def test_a_matters_files_stop_at_its_storage_quota(owner, outsider, settings):
    first = ("\n".join(line(f"a{n}") for n in range(20)) + "\n").encode()
    settings.PATHFINDER_MATTER_STORAGE_BYTES = len(first) + 100
    assert upload(owner, first).status_code == 200
    refused = upload(owner, first)
    assert refused.status_code == 413
    error = refused.json()["error"]
    assert error["param"] == "file" and error["code"] == "storage_quota_exceeded"
    assert "PATHFINDER_MATTER_STORAGE_BYTES" in error["message"]
    assert BatchFile.objects.filter(matter=owner.key.matter).count() == 1  # nothing stored
    assert upload(outsider, first).status_code == 200  # another matter's quota is its own
    # Full: a batch's output would have nowhere to go, so no batch starts.
    settings.PATHFINDER_MATTER_STORAGE_BYTES = len(first)
    stored = BatchFile.objects.get(matter=owner.key.matter)
    full = create(owner, stored.pk)
    assert full.status_code == 413 and full.json()["error"]["param"] == "input_file_id"
    assert not Batch.objects.filter(matter=owner.key.matter).exists()
    # Deleting a file no batch names makes room again.
    assert owner.api.delete(f"/v1/files/{stored.pk}").status_code == 200
    assert upload(owner, first).status_code == 200


def test_two_uploads_racing_for_the_last_room_cannot_both_pass_the_quota(owner, settings):
    """Upload A begins with room for one file; B is stored while A is half-read; A then finds
    B's file counted. (Without the last check, both pass. The audit store's append-only rows
    keep these tests in one transaction, so B runs inside A's read rather than on a second
    connection: what serialises two last checks is the lock on the matter's row.)"""
    data = ("\n".join(line(f"r{n}") for n in range(20)) + "\n").encode()
    settings.PATHFINDER_MATTER_STORAGE_BYTES = len(data) * 3 // 2
    matter, rival = owner.key.matter, []

    def uploaded(content) -> BatchFile:
        return batches.file_upload(
            matter=matter, api_key=owner.key, filename="race.jsonl", content=content,
            purpose="batch",
        )  # fmt: skip

    def read_while_b_is_stored():
        yield data[:10]
        rival.append(uploaded([data]))
        yield data[10:]

    with pytest.raises(batches.StorageQuotaExceeded, match="PATHFINDER_MATTER_STORAGE_BYTES"):
        uploaded(read_while_b_is_stored())
    assert len(rival) == 1  # B passed (and, inside A's transaction here, went with it)


def close_queries(owner, count: int, monkeypatch) -> int:
    """Queries the close of a batch of `count` completed lines makes."""
    monkeypatch.setattr(batches, "_CLOSE_PAGE", 10)
    file_id = upload(owner, "\n".join(line(f"d{n}") for n in range(count))).json()["id"]
    batch_id = create(owner, file_id).json()["id"]
    batches.batches_advance()
    jobs = GenerationJob.objects.filter(batch_line__batch_id=batch_id)
    for job_id in jobs.values_list("pk", flat=True):
        job_run(job_id=job_id)
    with CaptureQueriesContext(connection) as queries:
        assert batches._close(batch_id) == 1
    assert Batch.objects.get(pk=batch_id).status == Batch.Status.COMPLETED
    return len(queries)


def test_closing_reads_a_page_of_lines_in_a_fixed_number_of_queries(owner, monkeypatch):
    small = close_queries(owner, 10, monkeypatch)
    large = close_queries(owner, 40, monkeypatch)
    # Three pages more, three queries a page (lines with jobs, trails, answers), and the parts.
    assert large - small <= 3 * 3 + 2, (small, large)


def produced_matter(owner, tmp_path, chunk: int, monkeypatch, name: str) -> tuple[bytes, int]:
    """The owner's matter produced with the trails read, and verified, `chunk` at a time:
    (bytes, the queries of the export, the store's verification of its trails included)."""
    from audit import matter_export, verification
    from decoding.services import matter_bundle_export

    monkeypatch.setattr(matter_export, "CHUNK", chunk)
    monkeypatch.setattr(verification, "_TRAILS_READ_TOGETHER", chunk)
    with CaptureQueriesContext(connection) as queries:
        matter_bundle_export(matter=owner.key.matter, since=None, until=None, out=tmp_path / name)
    return (tmp_path / name).read_bytes(), len(queries)


def test_a_matter_is_read_a_chunk_of_trails_at_a_time_and_the_bundle_does_not_change(
    owner, beat, tmp_path, monkeypatch
):
    def batch_of(first: int) -> None:
        lines = [line(f"doc-{n}", prompt=(n % 31 + 1, 5)) for n in range(first, first + 12)]
        batch_id = create(owner, upload(owner, "\n".join(lines) + "\n").json()["id"]).json()["id"]
        run_to_end(batch_id)
        beat()

    batch_of(0)
    whole, twelve = produced_matter(owner, tmp_path, 500, monkeypatch, "whole.zip")
    chunked, in_fours = produced_matter(owner, tmp_path, 3, monkeypatch, "chunked.zip")
    assert chunked == whole  # the same bytes however the trails are read
    batch_of(12)
    _, twenty_four = produced_matter(owner, tmp_path, 500, monkeypatch, "more.zip")
    # Twelve trails more cost no query more (they share the chunk); four chunks where there was
    # one cost a fixed number a chunk: the export's three (the records, the job rows, the
    # erasures its destruction statements come from) and the verification's six (trail rows,
    # erasures, records, leaves, the leaves before them, job rows).
    assert twenty_four - twelve <= 4, (twelve, twenty_four)
    assert in_fours - twelve <= 3 * (3 + 6) + 2, (twelve, in_fours)

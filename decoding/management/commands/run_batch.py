"""manage.py run_batch FILE.jsonl --matter M: a Batch API batch from the command line.

The file is checked and stored as /v1/files does, the batch created as /v1/batches does, and the
workers run its lines (each an ordinary job with its own trail) while a progress bar follows
them; the output file, and the error file when any line failed, are written beside the input.
Interrupted, the batch runs on: its id is printed first, for /v1/batches/{id} or the desk.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from decoding import batch_files, batches
from decoding.job_input import InvalidInput
from decoding.models import Batch, BatchFile, Matter
from decoding.protocol.batch_lines import ENDPOINTS

BAR_WIDTH = 30


class Command(BaseCommand):
    help = "Run a JSONL file of /v1 requests as one batch, following it with a progress bar."

    def add_arguments(self, parser):
        parser.add_argument("file", type=Path, help="the batch input: one request per line")
        parser.add_argument("--matter", required=True)
        parser.add_argument(
            "--endpoint",
            choices=sorted(ENDPOINTS),
            help="default: the url of the file's first line",
        )
        parser.add_argument("--output", type=Path, help="default: FILE.output.jsonl")
        parser.add_argument("--errors", type=Path, help="default: FILE.errors.jsonl")
        parser.add_argument("--poll", type=float, default=1.0, help="seconds between looks")

    def handle(self, *args, **options):
        path: Path = options["file"]
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise CommandError(f"file: {exc}") from exc
        endpoint = options["endpoint"] or _first_url(data)
        matter, _ = Matter.objects.get_or_create(name=options["matter"])
        try:
            stored = batches.file_upload(
                matter=matter, api_key=None, filename=path.name, content=[data], purpose="batch"
            )
            batch = batches.batch_create(
                matter=matter,
                api_key=None,
                input_file_id=stored.pk,
                endpoint=endpoint,
                completion_window="24h",
            )
        except (InvalidInput, batches.FileTooLarge) as exc:
            raise CommandError(str(exc)) from exc
        self.stderr.write(f"batch {batch.pk}: {stored.line_count} lines to {endpoint}")
        batch = self._follow(batch, stored.line_count, options["poll"])
        self._write(batch.output_file_id, options["output"] or _beside(path, "output"))
        self._write(batch.error_file_id, options["errors"] or _beside(path, "errors"))
        counts = batches.request_counts(batch)
        self.stdout.write(
            json.dumps({"batch_id": batch.pk, "status": batch.status, "request_counts": counts})
        )
        if batch.status != Batch.Status.COMPLETED:
            raise CommandError(f"the batch ended {batch.status}")

    def _follow(self, batch: Batch, total: int, poll: float) -> Batch:
        """Redraw the bar until the batch ends."""
        while True:
            batch.refresh_from_db()
            counts = batches.request_counts(batch)
            self._draw(batch, total, counts)
            if batch.status in Batch.ENDED:
                self.stderr.write("")
                return batch
            time.sleep(poll)

    def _draw(self, batch: Batch, total: int, counts: dict) -> None:
        finished = counts["completed"] + counts["failed"]
        filled = BAR_WIDTH * finished // total if total else BAR_WIDTH
        bar = "#" * filled + "." * (BAR_WIDTH - filled)
        line = (
            f"\r[{bar}] {finished}/{total} lines, {counts['completed']} answered, "
            f"{counts['failed']} failed ({batch.status})"
        )
        self.stderr.write(line, ending="")
        sys.stderr.flush()

    def _write(self, file_id: str | None, target: Path) -> None:
        if file_id is None:
            return
        with open(target, "wb") as out:
            for piece in batch_files.pieces(BatchFile.objects.get(pk=file_id)):
                out.write(piece)
        self.stderr.write(f"wrote {target}")


def _first_url(data: bytes) -> str:
    for line in data.decode("utf-8", errors="replace").splitlines():
        try:
            url = json.loads(line).get("url")
        except (ValueError, AttributeError):
            continue
        if url in ENDPOINTS:
            return url
    raise CommandError(f"--endpoint: no line names one of {', '.join(sorted(ENDPOINTS))}")


def _beside(path: Path, kind: str) -> Path:
    return path.with_name(f"{path.stem}.{kind}.jsonl")

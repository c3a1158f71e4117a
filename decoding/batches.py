"""The Batch API's work: an input file uploaded and checked, a batch created over it, each line
made an ordinary job with its own trail (BatchLine), those jobs fed to the workers below every
interactive call, and the output and error files written when the batch ends.

Every step is a row change in the database, done under the batch row's lock and resumed by the
next `batches_advance` (beat, every 5 s; a kick on create and cancel) or `job_ended` (a
worker, as each line's job ends): a restart of any process loses nothing and runs no line twice.

Fair share: lines are stored queued but not sent, and the feeder sends them only while no
interactive job of their own matter is queued and fewer than PATHFINDER_BATCH_MAX_QUEUED lines
are sent and unfinished, taking the matters' batches in turn; each goes into the queue one place
behind its matter's next call (fair_share.queue_priority). So they never count against
PATHFINDER_MATTER_MAX_QUEUED, a call never waits behind its own matter's lines, and between
matters a line takes its turn like any call.
"""

from __future__ import annotations

import datetime as dt
import itertools
import json
import logging
import time
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from celery import current_app
from django.conf import settings
from django.db import DatabaseError, IntegrityError, transaction
from django.db.models import Count, Exists, OuterRef, ProtectedError, Q, Sum
from django.utils import timezone

from decoding import batch_files, delivery, events, fair_share, lifecycle, services
from decoding.feed_order import feed_key, shared_blocks
from decoding.job_input import InvalidInput
from decoding.models import ApiKey, Batch, BatchFile, BatchLine, GenerationJob, Matter
from decoding.protocol import batch_shapes
from decoding.protocol.batch_lines import (
    ENDPOINTS,
    LineRequest,
    custom_id_of,
    line_check,
    refusal_for,
)
from decoding.selectors import jobs_with_trails

logger = logging.getLogger(__name__)

ADVANCE_BATCHES = "decoding.advance_batches"  # the task decoding.tasks.advance_batches
COMPLETION_WINDOWS = {"24h": dt.timedelta(hours=24)}  # OpenAI's one window
_CHUNK = 100  # lines made into jobs per transaction
Status = Batch.Status
_UNFINISHED = (GenerationJob.Status.QUEUED, GenerationJob.Status.RUNNING)  # an index can find
_CLOSING = (Status.IN_PROGRESS, Status.FINALIZING, Status.CANCELLING)  # may end once drained


class FileTooLarge(Exception):
    """An upload over PATHFINDER_BATCH_MAX_FILE_BYTES (413, naming `file`)."""


class StorageQuotaExceeded(Exception):
    """The matter's files would pass PATHFINDER_MATTER_STORAGE_BYTES (413, naming it)."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field


class FileInUse(Exception):
    """A batch names the file (409): it is kept as long as the batch."""


class BatchEnded(Exception):
    """The batch already ended (or is being cancelled): there is nothing left to cancel."""


def file_upload(
    *,
    matter: Matter,
    api_key: ApiKey | None,
    filename: str,
    content: Iterable[bytes],
    purpose: str,
) -> BatchFile:
    """Store a batch input file, a part at a time as `content` is read, once it passes the
    file's own checks: UTF-8 JSONL, within the limits, each custom_id once. InvalidInput (or
    FileTooLarge) names what to fix; nothing is stored then. Each line's request is checked
    when the batch runs it."""
    if purpose != BatchFile.Purpose.BATCH:
        raise InvalidInput("purpose", 'Must be "batch": Pathfinder keeps files for batches only.')
    limit = settings.PATHFINDER_BATCH_MAX_FILE_BYTES
    left = storage_left(matter)
    with transaction.atomic():
        writer = batch_files.FileWriter(
            matter=matter,
            api_key=api_key,
            purpose=purpose,
            filename=filename[:255] or "batch.jsonl",
        )

        def stored_as_read():
            chunks = iter(content)
            for chunk in chunks:
                writer.write(chunk)
                if writer.file.bytes > limit:  # the rest is counted, not kept
                    size = writer.file.bytes + sum(len(rest) for rest in chunks)
                    raise FileTooLarge(f"file: the file is {size} bytes; the limit is {limit}.")
                if writer.file.bytes > left:
                    raise _quota_exceeded("file", matter, f"the file is over the {left} bytes left")
                yield chunk

        count = _checked_lines(batch_files.text_lines(stored_as_read()))
        _claim_room(matter, writer.file)
        return writer.close(line_count=count)


def _claim_room(matter: Matter, new: BatchFile) -> None:
    """The last check of an upload, under the matter row's lock until its commit: an upload of
    the same matter that committed since this one began counts too, so two racing for the last
    room cannot both pass the quota (StorageQuotaExceeded, rolled back)."""
    Matter.objects.select_for_update().filter(pk=matter.pk).values_list("pk").first()
    left = storage_left(matter)  # the new file's row says 0 bytes until it is closed
    if new.bytes > left:
        raise _quota_exceeded("file", matter, f"the file is over the {left} bytes left")


def storage_left(matter: Matter) -> int:
    """Bytes the matter's files may still take under PATHFINDER_MATTER_STORAGE_BYTES. Uploads
    stop at it; a batch's output is written whole however large (it records work done and
    audited) and may pass it, after which the matter uploads and starts nothing more."""
    used = BatchFile.objects.filter(matter=matter).aggregate(total=Sum("bytes"))["total"] or 0
    return settings.PATHFINDER_MATTER_STORAGE_BYTES - used


def _quota_exceeded(field: str, matter: Matter, why: str) -> StorageQuotaExceeded:
    quota = settings.PATHFINDER_MATTER_STORAGE_BYTES
    used = quota - storage_left(matter)
    return StorageQuotaExceeded(
        field,
        f"{field}: {why}: this matter's files hold {used} bytes of its "
        f"PATHFINDER_MATTER_STORAGE_BYTES ({quota}). Delete input files no batch names, or ask "
        "the operator for more.",
    )


def _checked_lines(lines: Iterator[tuple[int, str]]) -> int:
    """How many lines the input has, once every line is UTF-8, there are some and not too
    many, and no custom_id repeats (else InvalidInput naming the line)."""
    most = settings.PATHFINDER_BATCH_MAX_LINES
    first_seen: dict[str, int] = {}
    count = 0
    try:
        for number, text in lines:
            count += 1
            custom_id = custom_id_of(text)
            if custom_id is None or count > most:  # past the limit, lines are only counted
                continue
            if custom_id in first_seen:
                raise InvalidInput(
                    "file",
                    f"Line {number} repeats custom_id {custom_id!r} of line "
                    f"{first_seen[custom_id]}; each must be unique within the file.",
                )
            first_seen[custom_id] = number
    except batch_files.NotUtf8 as exc:
        raise InvalidInput("file", f"Not UTF-8 text (byte {exc.offset}).") from exc
    if not count:
        raise InvalidInput("file", "The file has no lines: one JSON request per line.")
    if count > most:
        raise InvalidInput("file", f"The file has {count} lines; the limit is {most}.")
    return count


def file_delete(*, stored: BatchFile) -> None:
    """Delete a file no batch names. A batch's input, output or error file is kept as long as
    the batch (FileInUse): it is the batch's record of what was asked and answered. The rule is
    the batch's foreign keys (PROTECT), so a batch created over the file meanwhile holds too."""
    try:
        with transaction.atomic():
            stored.delete()
    except ProtectedError as exc:
        batch = next(iter(exc.protected_objects))
        raise FileInUse(f"the file is a file of batch {batch.pk}, and is kept with it") from exc
    except IntegrityError as exc:  # a batch named it between Django's look and the DELETE
        raise FileInUse("a batch now names the file, and it is kept with it") from exc


def batch_create(
    *,
    matter: Matter,
    api_key: ApiKey | None,
    input_file_id: str,
    endpoint: str,
    completion_window: str,
    metadata: dict | None = None,
) -> Batch:
    """A batch over one of the matter's input files, validating until its lines are jobs."""
    if endpoint not in ENDPOINTS:
        raise InvalidInput("endpoint", f"Must be one of {', '.join(sorted(ENDPOINTS))}.")
    window = COMPLETION_WINDOWS.get(completion_window)
    if window is None:
        raise InvalidInput("completion_window", 'Only "24h" is supported.')
    if storage_left(matter) <= 0:  # its output and error files would have nowhere to go
        raise _quota_exceeded("input_file_id", matter, "no room is left for the batch's output")
    with transaction.atomic():
        # Locked: a delete of the file racing this create waits for it and then finds the file
        # in use (409), or wins and this create finds no file (400); never a broken reference.
        input_file = (
            BatchFile.objects.select_for_update()
            .filter(matter=matter, pk=input_file_id, purpose=BatchFile.Purpose.BATCH)
            .only("pk")
            .first()
        )
        if input_file is None:
            raise InvalidInput(
                "input_file_id", f"No batch input file {input_file_id!r} in this matter."
            )
        batch = Batch.objects.create(
            matter=matter,
            api_key=api_key,
            endpoint=endpoint,
            input_file=input_file,
            completion_window=completion_window,
            metadata=metadata,
            expires_at=timezone.now() + window,
        )
        transaction.on_commit(kick)
    return batch


def batch_cancel(*, batch: Batch) -> Batch:
    """Cancel a batch: its queued lines never run, its running lines stop at their next step,
    and it ends as cancelled with the files of what did finish."""
    with transaction.atomic():
        locked = Batch.objects.select_for_update().get(pk=batch.pk)
        if locked.status in Batch.ENDED or locked.status == Status.CANCELLING:
            raise BatchEnded(f"the batch is already {locked.status}")
        locked.status, locked.cancelling_at = Status.CANCELLING, timezone.now()
        locked.save(update_fields=["status", "cancelling_at"])
        transaction.on_commit(kick)
    return locked


def kick() -> None:
    """Ask a worker to advance the batches now rather than at beat's next tick."""
    try:
        current_app.send_task(ADVANCE_BATCHES, priority=0)
    except Exception as exc:  # beat advances them within seconds anyway
        logger.warning("could not kick the batches", extra={"error": str(exc)})


def batches_advance(budget_s: float = 20.0) -> dict:
    """Everything a batch waits for: its lines made into jobs (within `budget_s`; the next call
    goes on), the lines of a cancelled or expired batch stopped, the next lines sent, and each
    batch with nothing left unfinished closed with its files."""
    deadline = time.monotonic() + budget_s
    expanded = 0
    for batch_id in Batch.objects.filter(status=Status.VALIDATING).values_list("pk", flat=True):
        expanded += _isolated(batch_id, _expand, deadline)
        if time.monotonic() > deadline:
            break
    stopped = _stop_ending()
    sent = batches_feed()
    closed = sum(_isolated(pk, _close) for pk in _closable())
    if Batch.objects.filter(status=Status.VALIDATING).exists():
        transaction.on_commit(kick)  # the budget ran out: go on now rather than at beat's tick
    return {"expanded": expanded, "stopped": stopped, "sent": sent, "closed": closed}


def _isolated(batch_id: str, step, *args) -> int:
    """`step` (_expand, _close) for one batch. A fault of that batch's own (a line or a file the
    store refuses) fails that batch with the reason, and every other batch goes on; a store that
    is down is everyone's, and raises (beat's next tick tries again)."""
    try:
        return step(batch_id, *args)
    except (DatabaseError, ValueError, UnicodeError, KeyError, TypeError) as exc:
        if not _store_up():
            raise
        logger.exception("a batch failed on a fault of its own", extra={"batch_id": batch_id})
        _fail(batch_id, f"Pathfinder could not process this batch ({type(exc).__name__}).")
        return 0


def _store_up() -> bool:
    try:
        Batch.objects.exists()
    except DatabaseError:
        return False
    return True


def _fail(batch_id: str, reason: str) -> None:
    """End the batch as failed: its lines not yet ended are stopped as a cancel stops them, and
    it closes as `failed` with the reason in `errors` (no output written from a fault of its own
    in closing)."""
    with transaction.atomic():
        batch = Batch.objects.select_for_update().get(pk=batch_id)
        if batch.status in Batch.ENDED:
            return
        now = timezone.now()
        batch.errors = batch_shapes.batch_failure(batch.errors, reason)
        batch.failed_at = now
        if _unfinished_jobs(batch_id).exists() or batch.status == Status.VALIDATING:
            batch.status = Status.CANCELLING  # _stop_ending stops its jobs; _close ends it failed
        else:
            batch.status = Status.FAILED  # nothing left to stop, and its close is what failed
        batch.save(update_fields=["errors", "failed_at", "status"])


def job_ended(job_id) -> None:
    """A worker's call as any job ends: the next batch lines go out at once (an interactive
    job's end may be what a feed held off by it waited for), and a line's batch closes once
    nothing of it is left unfinished."""
    try:
        batches_feed()
        batch_id = (
            BatchLine.objects.filter(job_id=job_id).values_list("batch_id", flat=True).first()
        )
        if batch_id is None:
            return
        batch = Batch.objects.only("status", "sent_through_key", "sent_through_line").get(
            pk=batch_id
        )
        if batch.status == Status.IN_PROGRESS and _unsent(batch).exists():
            return  # lines wait to be sent: the batch cannot close (read by index, not a scan)
        if not _unfinished_jobs(batch_id).exists():
            _close(batch_id)
    except DatabaseError as exc:  # beat's next advance does it
        logger.warning(
            "could not advance a batch", extra={"job_id": str(job_id), "error": str(exc)}
        )


def _expand(batch_id: str, deadline: float) -> int:
    """Make the batch's next lines BatchLines (a job, or the endpoint's refusal), _CHUNK to a
    transaction, resuming at lines_expanded; in_progress once every line is one. The input is
    read a part at a time, from where the batch stands."""
    input_file = Batch.objects.select_related("input_file").get(pk=batch_id).input_file
    lines, position = iter(()), None
    made = 0
    while True:  # at least one chunk, however little of the budget is left
        with transaction.atomic():
            batch = Batch.objects.select_for_update().get(pk=batch_id)
            if batch.status != Status.VALIDATING:
                return made
            start = batch.lines_expanded
            if start != position:  # first time, or another advance moved it: read from there
                all_lines = batch_files.text_lines(batch_files.pieces(input_file))
                lines = itertools.islice(all_lines, start, None)
            chunk = list(itertools.islice(lines, _CHUNK))
            position = start + len(chunk)
            refused = [
                refusal
                for number, text in chunk
                if (refusal := _line_create(batch, number, text)) is not None
            ]
            batch.lines_expanded = position
            made += len(chunk)
            fields = ["lines_expanded"]
            if refused:  # OpenAI numbers a batch's line errors in errors.data[].line
                batch.errors = batch_shapes.line_errors(batch.errors, refused)
                fields.append("errors")
            if batch.lines_expanded >= input_file.line_count:
                batch.status, batch.in_progress_at = Status.IN_PROGRESS, timezone.now()
                fields += ["status", "in_progress_at"]
            batch.save(update_fields=fields)
        if batch.status != Status.VALIDATING or time.monotonic() > deadline:
            return made


def _line_create(batch: Batch, number: int, text: str) -> BatchLine | None:
    """The line made a job, or the refusal the endpoint would give it (that BatchLine)."""
    checked = line_check(batch.endpoint, text)
    if isinstance(checked, LineRequest):
        try:
            job = services.batch_job_create(
                matter=batch.matter, api_key=batch.api_key, **checked.native
            )
        except InvalidInput as exc:
            checked = refusal_for(checked, exc)
        else:
            BatchLine.objects.create(
                batch=batch,
                line=number,
                custom_id=checked.custom_id,
                job=job,
                logprobs_top=checked.logprobs_top,
                feed_key=feed_key(job.prompt_token_ids or ()),
            )
            return None
    refusal = {"status_code": checked.status_code, "body": checked.body}
    return BatchLine.objects.create(
        batch=batch, line=number, custom_id=checked.custom_id, refusal=refusal
    )


def _unfinished_jobs(batch_id):
    """The batch's lines' jobs not yet ended (`batch_id` a pk, or OuterRef for a subquery)."""
    return GenerationJob.objects.filter(batch_line__batch_id=batch_id, status__in=_UNFINISHED)


def _stop_ending() -> int:
    """Batches past their window end as expired; a cancelled or expired batch's unfinished jobs
    are cancelled (a queued one at once, a running one at its next step)."""
    now = timezone.now()
    for batch_id in Batch.objects.filter(
        status__in=(Status.VALIDATING, Status.IN_PROGRESS), expires_at__lte=now
    ).values_list("pk", flat=True):
        with transaction.atomic():
            batch = Batch.objects.select_for_update().get(pk=batch_id)
            if batch.status in (Status.VALIDATING, Status.IN_PROGRESS):
                batch.status, batch.expired_at = Status.FINALIZING, now
                batch.finalizing_at = now
                batch.save(update_fields=["status", "expired_at", "finalizing_at"])
    stopping = Batch.objects.filter(
        Q(status=Status.CANCELLING) | Q(status=Status.FINALIZING, expired_at__isnull=False)
    )
    jobs = GenerationJob.objects.filter(
        batch_line__batch__in=stopping, cancel_requested_at__isnull=True, status__in=_UNFINISHED
    )
    # The lines never sent (most of a large batch) in one UPDATE; the few sent one by one, as a
    # worker may be running them.
    unsent = list(jobs.filter(enqueued_at=None).values_list("pk", flat=True))
    stopped = lifecycle.queued_cancel_all(unsent)
    for job_id in unsent:  # a caller following a line's job by id sees it end
        events.publish(job_id)
    for job in jobs.exclude(enqueued_at=None):
        services.job_cancel_quietly(job=job)
        stopped += 1
    return stopped


def batches_feed() -> int:
    """Send the next batch lines, while fewer than PATHFINDER_BATCH_MAX_QUEUED lines are sent and
    unfinished: one turn of each matter with a batch in progress in turn (its oldest batch's
    next lines first), skipping a matter with an interactive job of its own queued (interactive
    first within a matter). A turn is a line, or the next lines of one document, up to
    PATHFINDER_BATCH_DOCUMENT_LINES: a batch's lines go in feed-key order (decoding.feed_order),
    a document's side by side, and those sent together are evaluated once and decoded in the
    same passes. Another matter's queued calls hold nothing back here, and in the queue a line
    takes its matter's turn (fair_share.queue_priority), so one matter's load, however steady,
    cannot keep another's batch waiting for good. Returns how many lines were sent."""
    with transaction.atomic():
        # Locks the batches in progress, so two feeders count and send in turn.
        active = list(
            Batch.objects.select_for_update()
            .filter(status=Status.IN_PROGRESS)
            .order_by("created_at", "pk")
        )
        busy = fair_share.matters_with_calls_queued()
        active = [batch for batch in active if batch.matter_id not in busy]
        if not active:
            return 0
        in_flight = GenerationJob.objects.filter(
            batch_line__isnull=False, enqueued_at__isnull=False, status__in=_UNFINISHED
        ).count()
        free = settings.PATHFINDER_BATCH_MAX_QUEUED - in_flight
        if free <= 0:
            return 0
        waiting: dict[int, list[list[_Unsent]]] = defaultdict(list)
        for batch in active:
            if len(waiting[batch.matter_id]) < free:
                waiting[batch.matter_id] += _turns(batch, free)
        picked = [line for turn in fair_share.in_turn(waiting, free) for line in turn]
        # Marked sent in this transaction (the next feeder counts them); the messages go after
        # it commits. One the broker did not take is found by the recovery sweep and sent again.
        job_ids = [line.job_id for line in picked]
        GenerationJob.objects.filter(pk__in=job_ids).update(enqueued_at=timezone.now())
        for line in picked:  # in feed order within a batch: the last one stays
            line.batch.sent_through_key, line.batch.sent_through_line = line.key, line.number
        for batch in {line.batch.pk: line.batch for line in picked}.values():
            batch.save(update_fields=["sent_through_key", "sent_through_line"])
        transaction.on_commit(lambda: _send(job_ids))
    return len(picked)


@dataclass(frozen=True)
class _Unsent:
    batch: Batch
    number: int
    job_id: str
    key: bytes


def _turns(batch: Batch, most: int) -> list[list[_Unsent]]:
    """The batch's next `most` turns: each its next line and the lines after it that share a
    document with it (a 64-token block or more), up to PATHFINDER_BATCH_DOCUMENT_LINES."""
    size = settings.PATHFINDER_BATCH_DOCUMENT_LINES
    turns: list[list[_Unsent]] = []
    for number, job_id, key in _unsent(batch)[: most * size]:
        line = _Unsent(batch, number, job_id, bytes(key))
        turn = turns[-1] if turns else None
        if turn and len(turn) < size and shared_blocks(turn[0].key, line.key) > 0:
            turn.append(line)
        elif len(turns) < most:
            turns.append([line])
        else:
            break
    return turns


def _unsent(batch: Batch):
    """(line, job id, feed key) of the batch's lines not yet sent, in feed order, read on from
    the feeder's place by the (batch, feed key, line) index."""
    place = bytes(batch.sent_through_key)
    return (
        BatchLine.objects.filter(
            Q(feed_key__gt=place) | Q(feed_key=place, line__gt=batch.sent_through_line),
            batch=batch,
            job__status=GenerationJob.Status.QUEUED,
            job__enqueued_at=None,
        )
        .order_by("feed_key", "line")
        .values_list("line", "job_id", "feed_key")
    )


def _send(job_ids: list[str]) -> None:
    jobs = GenerationJob.objects.filter(pk__in=job_ids).only("pk", "matter_id")
    for job in sorted(jobs, key=lambda job: job_ids.index(job.pk)):
        try:
            delivery.send(job)
        except Exception as exc:
            logger.warning("could not send a batch line", extra={"job_id": str(job.pk),
                                                                  "error": str(exc)})  # fmt: skip
            return


def _closable() -> list[str]:
    """Batches past validating (or cancelled in it) with none of their lines' jobs unfinished."""
    batches = Batch.objects.filter(status__in=_CLOSING)
    return list(
        batches.exclude(Exists(_unfinished_jobs(OuterRef("pk")))).values_list("pk", flat=True)
    )


def _close(batch_id: str) -> int:
    """Write the batch's output and error files and end it: completed, cancelled or expired.
    The files are written a page of lines at a time (a fixed number of queries per page) without
    the batch's lock, which is taken only to record the end, and only if the batch is still as
    it was read (a cancel or an expiry meanwhile: everything is rolled back, and the next
    advance closes it afresh)."""
    batch = Batch.objects.select_related("input_file").get(pk=batch_id)
    if batch.status not in _CLOSING or _unfinished_jobs(batch_id).exists():
        return 0
    ending, stamp = _ending(batch)
    with transaction.atomic():
        output = batch_files.FileWriter(**_output_fields(batch, "output"))
        errors = batch_files.FileWriter(**_output_fields(batch, "errors"))
        done = failed = 0
        for page in _line_pages(batch):
            for line in page:
                if batch_shapes.succeeded(line):
                    output.write(_jsonl(batch_shapes.output_line(line)))
                    done += 1
                else:
                    errors.write(_jsonl(batch_shapes.error_line(line, ending)))
                    failed += 1
        never_made = 0
        for number, text in _unread_lines(batch):
            row = batch_shapes.never_made_line(batch, number, custom_id_of(text), ending)
            errors.write(_jsonl(row))
            never_made += 1
        locked = Batch.objects.select_for_update().get(pk=batch_id)
        changed = _ending(locked) != (ending, stamp) or locked.status not in _CLOSING
        if changed or _unfinished_jobs(batch_id).exists():
            transaction.set_rollback(True)  # changed meanwhile: the files go with it
            return 0
        locked.output_file = _kept(output, done)
        locked.error_file = _kept(errors, failed + never_made)
        now = timezone.now()
        locked.status = ending
        locked.finalizing_at = locked.finalizing_at or now
        setattr(locked, stamp, getattr(locked, stamp) or now)
        locked.save()
    failed += never_made
    logger.info("batch ended", extra={"batch_id": batch_id, "status": ending,
                                      "completed": done, "failed": failed})  # fmt: skip
    return 1


def _ending(batch: Batch) -> tuple[str, str]:
    """The status a draining batch ends in, and the stamp that says when."""
    if batch.failed_at is not None:
        return Status.FAILED, "failed_at"
    if batch.status == Status.CANCELLING:
        return Status.CANCELLED, "cancelled_at"
    if batch.expired_at is not None:
        return Status.EXPIRED, "expired_at"
    return Status.COMPLETED, "completed_at"


_CLOSE_PAGE = 500  # lines shaped per page: three queries (lines and jobs, trails, answers)


def _line_pages(batch: Batch) -> Iterator[list[BatchLine]]:
    """The batch's lines in order, a page at a time, each job with its trail and answer."""
    last = 0
    while True:
        page = list(
            BatchLine.objects.filter(batch=batch, line__gt=last)
            .select_related("job", "job__model_spec")
            .order_by("line")[:_CLOSE_PAGE]
        )
        if not page:
            return
        jobs_with_trails(line.job for line in page if line.job is not None)
        for line in page:
            line.batch = batch
        yield page
        last = page[-1].line


def _unread_lines(batch: Batch) -> Iterator[tuple[int, str]]:
    """The input's lines the batch ended before making into BatchLines (a cancel, expiry or
    failure while validating)."""
    if batch.lines_expanded >= batch.input_file.line_count:
        return iter(())  # every line was read: the input need not be
    lines = batch_files.text_lines(batch_files.pieces(batch.input_file))
    return itertools.islice(lines, batch.lines_expanded, None)


def _output_fields(batch: Batch, kind: str) -> dict:
    return {
        "matter_id": batch.matter_id,
        "api_key_id": batch.api_key_id,
        "purpose": BatchFile.Purpose.BATCH_OUTPUT,
        "filename": f"{batch.pk}_{kind}.jsonl",
    }


def _jsonl(row: dict) -> bytes:
    return (json.dumps(row, ensure_ascii=False) + "\n").encode("utf-8")


def _kept(writer: batch_files.FileWriter, lines: int) -> BatchFile | None:
    """The file written, or None (and no file) when it has no line: OpenAI's null file id."""
    if not lines:
        writer.file.delete()
        return None
    return writer.close(line_count=lines)


def request_counts(batch: Batch) -> dict:
    """OpenAI's request_counts: the lines made so far, those answered, and those refused or whose
    job failed or was cancelled."""
    counts = BatchLine.objects.filter(batch=batch).aggregate(
        total=Count("pk"),
        completed=Count("pk", filter=Q(job__status=GenerationJob.Status.SUCCEEDED)),
        failed=Count(
            "pk",
            filter=Q(job__isnull=True)
            | Q(job__status__in=(GenerationJob.Status.FAILED, GenerationJob.Status.CANCELLED)),
        ),
    )
    return counts


def line_outcomes(batch: Batch) -> dict:
    """How the batch's lines made so far ended, as a reviewer reads them: answered, refused (a
    line that made no job: its error is in the error file), failed (its job failed) and
    cancelled (its job was cancelled with the batch); request_counts' `failed` is the last
    three together, as OpenAI counts them."""
    jobs = GenerationJob.Status
    return BatchLine.objects.filter(batch=batch).aggregate(
        completed=Count("pk", filter=Q(job__status=jobs.SUCCEEDED)),
        refused=Count("pk", filter=Q(job__isnull=True)),
        failed=Count("pk", filter=Q(job__status=jobs.FAILED)),
        cancelled=Count("pk", filter=Q(job__status=jobs.CANCELLED)),
    )

"""The Batch API's work: an input file uploaded and checked, a batch created over it, each line
made an ordinary job with its own trail (BatchLine), those jobs fed to the workers below every
interactive call, and the output and error files written when the batch ends.

Every step is a row change in the database, done under the batch row's lock and resumed by the
next `batches_advance` (beat, every 5 s; a kick on create and cancel) or `job_ended` (a
worker, as each line's job ends): a restart of any process loses nothing and runs no line twice.

Fair share: lines are stored queued but not sent, and the feeder sends them, lowest priority,
only while no interactive job is queued and fewer than PATHFINDER_BATCH_MAX_QUEUED lines are
sent and unfinished, taking the matters' batches in turn. So they never count against
PATHFINDER_MATTER_MAX_QUEUED (admission), and an interactive call never waits behind them in
the queue.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import time
from collections import defaultdict

from celery import current_app
from django.conf import settings
from django.db import DatabaseError, IntegrityError, transaction
from django.db.models import Count, Exists, OuterRef, ProtectedError, Q
from django.utils import timezone

from decoding import admission, delivery, events, lifecycle, services
from decoding.job_input import InvalidInput
from decoding.models import ApiKey, Batch, BatchFile, BatchLine, GenerationJob, Matter
from decoding.web.openai_api import batch_shapes
from decoding.web.openai_api.batch_lines import (
    ENDPOINTS,
    LineRequest,
    custom_id_of,
    line_check,
    refusal_for,
)

logger = logging.getLogger(__name__)

ADVANCE_BATCHES = "decoding.advance_batches"  # the task decoding.tasks.advance_batches
COMPLETION_WINDOWS = {"24h": dt.timedelta(hours=24)}  # OpenAI's one window
_CHUNK = 100  # lines made into jobs per transaction
Status = Batch.Status
_UNFINISHED = (GenerationJob.Status.QUEUED, GenerationJob.Status.RUNNING)  # an index can find
_CLOSING = (Status.IN_PROGRESS, Status.FINALIZING, Status.CANCELLING)  # may end once drained


class FileTooLarge(Exception):
    """An upload over PATHFINDER_BATCH_MAX_FILE_BYTES (413, naming `file`)."""


class FileInUse(Exception):
    """A batch names the file (409): it is kept as long as the batch."""


class BatchEnded(Exception):
    """The batch already ended (or is being cancelled): there is nothing left to cancel."""


def file_upload(
    *, matter: Matter, api_key: ApiKey | None, filename: str, data: bytes, purpose: str
) -> BatchFile:
    """Store a batch input file once it passes the file's own checks: UTF-8 JSONL, within the
    limits, each custom_id once. InvalidInput (or FileTooLarge) names what to fix; nothing is
    stored then. Each line's request is checked when the batch runs it."""
    if purpose != BatchFile.Purpose.BATCH:
        raise InvalidInput("purpose", 'Must be "batch": Pathfinder keeps files for batches only.')
    limit = settings.PATHFINDER_BATCH_MAX_FILE_BYTES
    if len(data) > limit:
        raise FileTooLarge(f"file: the file is {len(data)} bytes; the limit is {limit}.")
    try:
        lines = input_lines(data)
    except UnicodeDecodeError as exc:
        raise InvalidInput("file", f"Not UTF-8 text (byte {exc.start}).") from exc
    if not lines:
        raise InvalidInput("file", "The file has no lines: one JSON request per line.")
    most = settings.PATHFINDER_BATCH_MAX_LINES
    if len(lines) > most:
        raise InvalidInput("file", f"The file has {len(lines)} lines; the limit is {most}.")
    first_seen: dict[str, int] = {}
    for number, text in lines:
        custom_id = custom_id_of(text)
        if custom_id is None:
            continue
        if custom_id in first_seen:
            raise InvalidInput(
                "file",
                f"Line {number} repeats custom_id {custom_id!r} of line {first_seen[custom_id]}; "
                "each must be unique within the file.",
            )
        first_seen[custom_id] = number
    return BatchFile.objects.create(
        matter=matter,
        api_key=api_key,
        purpose=purpose,
        filename=filename[:255] or "batch.jsonl",
        content=data,
        bytes=len(data),
        line_count=len(lines),
    )


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


def input_lines(data: bytes) -> list[tuple[int, str]]:
    """(1-based line number, text) of each line that is not blank; a UTF-8 byte-order mark
    before the first line (Notepad's, PowerShell 5's) is not part of it."""
    text = data.decode("utf-8-sig")
    return [(n, line) for n, line in enumerate(text.split("\n"), start=1) if line.strip()]


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
    input_file = (
        BatchFile.objects.filter(matter=matter, pk=input_file_id, purpose=BatchFile.Purpose.BATCH)
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
        batch = Batch.objects.only("status", "sent_through_line").get(pk=batch_id)
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
    transaction, resuming at lines_expanded; in_progress once every line is one."""
    input_file = Batch.objects.values_list("input_file_id", flat=True).get(pk=batch_id)
    lines = input_lines(bytes(BatchFile.objects.get(pk=input_file).content))
    made = 0
    while True:  # at least one chunk, however little of the budget is left
        with transaction.atomic():
            batch = Batch.objects.select_for_update().get(pk=batch_id)
            if batch.status != Status.VALIDATING:
                return made
            start = batch.lines_expanded
            refused = [
                refusal
                for number, text in lines[start : start + _CHUNK]
                if (refusal := _line_create(batch, number, text)) is not None
            ]
            batch.lines_expanded = min(start + _CHUNK, len(lines))
            made += batch.lines_expanded - start
            fields = ["lines_expanded"]
            if refused:  # OpenAI numbers a batch's line errors in errors.data[].line
                batch.errors = batch_shapes.line_errors(batch.errors, refused)
                fields.append("errors")
            if batch.lines_expanded == len(lines):
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
    unfinished: one line of each matter with a batch in progress in turn (its oldest batch's
    first line first), skipping a matter with an interactive job of its own queued (interactive
    first within a matter). Another matter's queued calls hold nothing back here: they are ahead
    in the queue (a line goes at the lowest priority) and in the worker's passes, so one matter's
    load cannot keep another's batch at zero lines. Returns how many."""
    with transaction.atomic():
        # Locks the batches in progress, so two feeders count and send in turn.
        active = list(
            Batch.objects.select_for_update()
            .filter(status=Status.IN_PROGRESS)
            .order_by("created_at", "pk")
        )
        queued_calls = admission.interactive_jobs().filter(status=GenerationJob.Status.QUEUED)
        busy = set(queued_calls.values_list("matter_id", flat=True).distinct())
        active = [batch for batch in active if batch.matter_id not in busy]
        if not active:
            return 0
        in_flight = GenerationJob.objects.filter(
            batch_line__isnull=False, enqueued_at__isnull=False, status__in=_UNFINISHED
        ).count()
        free = settings.PATHFINDER_BATCH_MAX_QUEUED - in_flight
        if free <= 0:
            return 0
        waiting: dict[int, list[tuple[Batch, int, str]]] = defaultdict(list)
        for batch in active:
            if len(waiting[batch.matter_id]) < free:
                waiting[batch.matter_id] += [
                    (batch, number, job_id) for number, job_id in _unsent(batch)[:free]
                ]
        picked: list[tuple[Batch, int, str]] = []
        while len(picked) < free and any(waiting.values()):
            for lines in waiting.values():
                if lines and len(picked) < free:
                    picked.append(lines.pop(0))
        # Marked sent in this transaction (the next feeder counts them); the messages go after
        # it commits. One the broker did not take is found by the recovery sweep and sent again.
        job_ids = [job_id for _, _, job_id in picked]
        GenerationJob.objects.filter(pk__in=job_ids).update(enqueued_at=timezone.now())
        for batch, number, _ in picked:  # in file order within a batch: the last one stays
            batch.sent_through_line = number
        for batch in {batch.pk: batch for batch, _, _ in picked}.values():
            batch.save(update_fields=["sent_through_line"])
        transaction.on_commit(lambda: _send(job_ids))
    return len(picked)


def _unsent(batch: Batch):
    """(line, job id) of the batch's lines not yet sent, in file order, read on from the
    feeder's place by the (batch, line) index."""
    return (
        BatchLine.objects.filter(
            batch=batch,
            line__gt=batch.sent_through_line,
            job__status=GenerationJob.Status.QUEUED,
            job__enqueued_at=None,
        )
        .order_by("line")
        .values_list("line", "job_id")
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
    """Write the batch's output and error files and end it: completed, cancelled or expired."""
    with transaction.atomic():
        batch = Batch.objects.select_for_update().get(pk=batch_id)
        if batch.status not in _CLOSING or _unfinished_jobs(batch_id).exists():
            return 0
        now = timezone.now()
        if batch.failed_at is not None:
            ending, stamp = Status.FAILED, "failed_at"
        elif batch.status == Status.CANCELLING:
            ending, stamp = Status.CANCELLED, "cancelled_at"
        elif batch.expired_at is not None:
            ending, stamp = Status.EXPIRED, "expired_at"
        else:
            ending, stamp = Status.COMPLETED, "completed_at"
        lines = list(
            BatchLine.objects.filter(batch=batch)
            .select_related("batch", "job", "job__model_spec")
            .order_by("line")
        )
        done = [line for line in lines if batch_shapes.succeeded(line)]
        failed = [line for line in lines if not batch_shapes.succeeded(line)]
        batch.output_file = _output_file(
            batch, "output", [batch_shapes.output_line(x) for x in done]
        )
        never_made = [
            batch_shapes.never_made_line(batch, number, custom_id_of(text), ending)
            for number, text in _unread_lines(batch)
        ]
        batch.error_file = _output_file(
            batch, "errors", [batch_shapes.error_line(x, ending) for x in failed] + never_made
        )
        batch.status = ending
        batch.finalizing_at = batch.finalizing_at or now
        setattr(batch, stamp, getattr(batch, stamp) or now)
        batch.save()
    logger.info("batch ended", extra={"batch_id": batch_id, "status": ending,
                                      "completed": len(done), "failed": len(failed)})  # fmt: skip
    return 1


def _unread_lines(batch: Batch) -> list[tuple[int, str]]:
    """The input's lines the batch ended before making into BatchLines (a cancel, expiry or
    failure while validating)."""
    if batch.lines_expanded >= batch.input_file.line_count:
        return []  # every line was read: the input need not be
    return input_lines(bytes(batch.input_file.content))[batch.lines_expanded :]


def _output_file(batch: Batch, kind: str, rows: list[dict]) -> BatchFile | None:
    if not rows:
        return None
    data = "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows).encode("utf-8")
    return BatchFile.objects.create(
        matter_id=batch.matter_id,
        api_key_id=batch.api_key_id,
        purpose=BatchFile.Purpose.BATCH_OUTPUT,
        filename=f"{batch.pk}_{kind}.jsonl",
        content=data,
        bytes=len(data),
        line_count=len(rows),
    )


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

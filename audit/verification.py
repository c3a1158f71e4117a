"""Verify what the database holds: stream rows from one consistent snapshot into
audit.evidence.chain and
audit.evidence.binding, collect every failure, and record the run.

One pipeline checks each trail, whoever asks (verify_chain in every mode, the portal's Verify
and sign-off, export, the periodic check): every link of its chain; its request, decisions and
answer (format v2); the job row that points at it (prompt, params, stop strings, output, trail
pointer, request id); its ledger leaf; and, once sealed, its inclusion under the newest valid
signed checkpoint that covers it.
"""

from __future__ import annotations

import json
import uuid
from collections import namedtuple
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from itertools import groupby

import orjson
from django.db import connection, transaction
from django.utils import timezone

from . import anchored, claims, parallel
from .dbtext import canonical, uuid_text
from .evidence import binding, chain, checkpoints, matter_leaves, merkle, sealing
from .evidence.tile_math import LogIncomplete
from .keys import verify_note
from .log import (
    NotYetCovered,
    WitnessStatus,
    checkpoint_covering,
    checkpoint_failures,
    latest_checkpoint,
    log_size,
    witness_status,
)
from .models import (
    Checkpoint,
    DecisionRecord,
    Erasure,
    LedgerEntry,
    MatterKey,
    Trail,
    VerificationRun,
)
from .publish import published_failures
from .tiles import Tiles

_CHUNK = 2000
_WALK_BATCH = 200  # trails whose records are read in one query, when only some are walked
_CLAIM_BATCH = 2000  # trails whose job rows are fetched and compared in one query
_TRAILS_READ_TOGETHER = 500  # trails verify_trails reads in one query of each table


@dataclass
class Report:
    scope: str
    trails_checked: int = 0
    records_checked: int = 0  # walked, link by link
    records_covered: int = 0  # walked, or anchored and unchanged since a verified point
    trails_anchored: int = 0  # not walked again: anchored and unchanged since that point
    ledger_entries_checked: int = 0
    jobs_checked: int = 0
    failures: list[chain.Failure] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # The checkpoint the last sealed trail was proven under (id, tree size), if any.
    checkpoint_id: int | None = None
    checkpoint_size: int | None = None

    @property
    def ok(self) -> bool:
        return not self.failures

    def lines(self) -> list[str]:
        """The report for people: a summary, then each broken link."""
        lines = [
            f"Verified {self.scope}: {self.trails_checked} trails, {self.records_covered} "
            f"records ({self.records_checked} walked), {self.ledger_entries_checked} ledger "
            f"entries, {self.jobs_checked} job rows.",
            *(f"Note: {note}" for note in self.notes),
        ]
        if self.ok:
            return [*lines, "INTACT: every link verifies."]
        return [
            *lines,
            f"BROKEN: {len(self.failures)} broken link(s).",
            *(f"  {failure}" for failure in self.failures),
        ]

    def as_dict(self) -> dict:
        return {
            "scope": self.scope,
            "ok": self.ok,
            "trails_checked": self.trails_checked,
            "records_checked": self.records_checked,
            "records_covered": self.records_covered,
            "trails_anchored": self.trails_anchored,
            "ledger_entries_checked": self.ledger_entries_checked,
            "jobs_checked": self.jobs_checked,
            "checkpoint": self.checkpoint_size,
            "notes": self.notes,
            "failures": [failure.as_dict() for failure in self.failures],
        }


@dataclass
class _Walked:
    """One trail after its records were streamed: what the chain and the contents showed."""

    trail: Trail | None
    summary: chain.TrailSummary
    contents: binding.Contents
    erased: bool = False  # its texts destroyed under an order (audit.erasure)


def verify_trails(trail_ids: Iterable[uuid.UUID | str], *, scope: str) -> Report:
    """Verify the given trails (see the module docstring for what is checked), reading them
    _TRAILS_READ_TOGETHER at a time: a fixed number of queries a chunk, not a few a trail."""
    started = timezone.now()
    report = Report(scope=scope)
    with _snapshot():
        keys = _matter_keys()
        inclusions = _Inclusions()
        ids = [str(trail_id) for trail_id in trail_ids]
        for start in range(0, len(ids), _TRAILS_READ_TOGETHER):
            _verify_chunk(ids[start : start + _TRAILS_READ_TOGETHER], report, keys, inclusions)
    return _recorded(report, started)


def _verify_chunk(trail_ids: list[str], report: Report, keys: dict, inclusions: _Inclusions):
    """verify_trails for one chunk: its trail rows, records, leaves, the leaves before those
    and its job rows, one query each."""
    trails = {str(trail.id): trail for trail in Trail.objects.filter(pk__in=trail_ids)}
    erased = _erased(Erasure.objects.filter(trail_id__in=trail_ids))
    records = DecisionRecord.objects.filter(trail_id__in=trail_ids).order_by(
        "trail_id", "seq", "id"
    )
    walked: dict[str, _Walked] = {}
    for trail_id, rows in groupby(_stored(records), key=lambda record: record[0].trail_id):
        walked[trail_id] = _walk(trail_id, trails.get(trail_id), rows, report, erased)
    entries: dict[str, LedgerEntry] = {}
    for entry in LedgerEntry.objects.filter(trail_id__in=trail_ids).order_by("id"):
        entries.setdefault(str(entry.trail_id), entry)
    previous: dict[int, LedgerEntry] = {}
    before = [entry.seq - 1 for entry in entries.values() if entry.seq > 0]
    for entry in LedgerEntry.objects.filter(seq__in=before).order_by("seq", "id"):
        previous.setdefault(entry.seq, entry)
    for trail_id in dict.fromkeys(trail_ids):  # each once, in the order asked
        if trail_id not in walked:  # a trail without a single record
            walked[trail_id] = _walk(trail_id, trails.get(trail_id), (), report, erased)
        entry = entries.get(trail_id)
        if entry is not None:
            report.failures.extend(_ledger_link_failures(entry, previous.get(entry.seq - 1)))
            report.ledger_entries_checked += 1
            _check_inclusion(entry, report, inclusions)
        _check_head(trail_id, walked[trail_id], entry.payload if entry else None, report, keys)
    _check_claims([walked[trail_id] for trail_id in dict.fromkeys(trail_ids)], report)


def verify_everything(*, progress: Callable[[], None] | None = None, full: bool = False) -> Report:
    """Verify every trail, job row and the whole ledger, one streamed pass over each table.

    Incremental unless `full`: trails anchored under the last verified point (audit.anchored)
    are not walked record by record again; everything else is."""
    started = timezone.now()
    report = Report(scope="all")
    fresh = not connection.in_atomic_block  # shards read the snapshot only if it is our own
    with _snapshot():
        xmin = anchored.snapshot_xmin()
        point = None if full else _usable_point(report)
        if full:
            _note(report, "every record walked, as asked (a full run)")
        # Every shard reads its own range of trails (their rows, leaves and record counts)
        # from the same snapshot; the log's own checks run beside them.
        context = _Context(point, progress)
        workers = parallel.workers() if fresh else 1
        shards = [*_shards(workers), _LOG]
        for part in parallel.run_sharded(context.check, shards, side_by_side=workers > 1):
            _merge(report, part)
        if point is not None:
            _note(
                report,
                f"incremental from verification run {point.run_id} (checkpoint of {point.size} "
                f"leaves): {report.trails_anchored} anchored trails unchanged since were not "
                "walked again",
            )
        _check_pointers(report)
        verified = latest_checkpoint(log_size()) if report.ok and xmin is not None else None
    return _recorded(report, started, point=(verified, xmin) if verified else None)


# A trail row as every check reads it (attribute names as the model's), without a model instance.
_TrailRow = namedtuple(
    "_TrailRow",
    "id job_id attempt previous_id status outcome record_count head_hash format_version salt "
    "batch_id",
)


def _trail_rows():
    """Every trail row as _TrailRow's fields, its ids as text (as every check compares them)."""
    return Trail.objects.values_list(
        *(uuid_text(name) if name in _TRAIL_IDS else name for name in _TrailRow._fields)
    )


_TRAIL_IDS = ("id", "job_id", "previous_id")


def _trail_row(values: tuple) -> _TrailRow:
    row = _TrailRow._make(values)
    return row._replace(**{name: canonical(getattr(row, name)) for name in _TRAIL_IDS})


@dataclass(frozen=True)
class _Shard:
    """The trails whose ids are in [lo, hi) (None: unbounded)."""

    lo: str | None
    hi: str | None

    def of(self, queryset, field: str = "trail_id"):
        """The rows of `queryset` that belong to the shard's trails (by `field`)."""
        if self.lo is not None:
            queryset = queryset.filter(**{f"{field}__gte": self.lo})
        if self.hi is not None:
            queryset = queryset.filter(**{f"{field}__lt": self.hi})
        return queryset


def _shards(count: int) -> list[_Shard]:
    """`count` ranges of the id space (trail ids are random UUIDs: about as many trails
    each), covering every id."""
    if count <= 1:
        return [_Shard(None, None)]
    cuts = [str(uuid.UUID(int=(i << 128) // count)) for i in range(1, count)]
    return [_Shard(lo, hi) for lo, hi in zip([None, *cuts], [*cuts, None], strict=True)]


# The shard that checks the log itself (the ledger's chain, the checkpoints, the published
# checkpoints and the tiles), beside the trail shards.
_LOG = "log"


@dataclass
class _Context:
    """What every shard's check needs besides its own rows."""

    point: anchored.Point | None
    progress: Callable[[], None] | None

    def check(self, shard: _Shard | str) -> Report:
        """Every per-trail check of the trails in `shard`: their records (walked, or anchored),
        their job rows, their leaves and open heads; or, for _LOG, the log's own checks."""
        if shard == _LOG:
            return self._check_log()
        part = Report(scope="all")
        trails = {
            row.id: row
            for row in map(
                _trail_row, shard.of(_trail_rows(), field="id").iterator(chunk_size=_CHUNK)
            )
        }
        sealed, sealed_at = _sealed(shard.of(LedgerEntry.objects.all()))
        erased = _erased(shard.of(Erasure.objects.all()))
        fixed: dict[str, int] = {}
        to_walk = None  # every trail with records
        if self.point is not None:
            counts = anchored.record_counts(self.point, shard.lo, shard.hi)
            fixed, to_walk = _anchored_trails(self.point, sealed, sealed_at, counts)
            part.trails_anchored = len(fixed)
        summaries: dict[str, chain.TrailSummary] = {}
        requests: dict[str, dict | None] = {}  # each walked trail's request record
        batch: list[_Walked] = []
        for trail_id, records in _records_to_walk(to_walk, shard):
            walked = _walk(trail_id, trails.get(trail_id), records, part, erased)
            summaries[trail_id], requests[trail_id] = walked.summary, walked.contents.request
            batch = self._next(batch, walked, part)
        for walked in _anchored_walks(fixed, trails, sealed, part, shard, erased):
            trail_id = walked.contents.trail_id
            summaries[trail_id], requests[trail_id] = walked.summary, walked.contents.request
            batch = self._next(batch, walked, part)
        for trail_id in trails.keys() - summaries.keys():  # trails without a single record
            walked = _walk(trail_id, trails[trail_id], (), part, erased)
            summaries[trail_id], requests[trail_id] = walked.summary, None
            batch = _claims_batch(batch, walked, part)
        _check_claims(batch, part)
        keys = _matter_keys()
        for trail_id, payload in sealed.items():
            part.failures.extend(chain.check_sealed_trail(payload, summaries.get(trail_id)))
            part.failures.extend(_leaf_against_row(payload, trails.get(trail_id)))
            part.failures.extend(
                _tag_failures(payload, requests.get(trail_id), trails.get(trail_id), keys)
            )
        for trail_id, trail in trails.items():
            if trail_id not in sealed:
                _check_open(trail_id, summaries[trail_id], trail, part)
        for trail_id in summaries.keys() - trails.keys() - sealed.keys():
            part.failures.append(
                chain.Failure("trail", trail_id, 0, "records belong to a trail that does not exist")
            )
        return part

    def _check_log(self) -> Report:
        """The whole ledger's chain, every checkpoint against its leaves, the published
        checkpoints and the stored tiles."""
        part = Report(scope="all")
        leaves: list[bytes] = []
        for _, failures in chain.verify_ledger(_ledger_entries(leaves)):
            part.ledger_entries_checked += 1
            part.failures.extend(failures)
        for reason in checkpoint_failures(leaves):
            part.failures.append(chain.Failure("checkpoint", None, None, reason))
        for reason in published_failures(leaves, len(leaves)):
            part.failures.append(chain.Failure("checkpoint", None, None, reason))
        return part

    def _next(self, batch: list[_Walked], walked: _Walked, part: Report) -> list[_Walked]:
        if self.progress:
            self.progress()
        return _claims_batch(batch, walked, part)


def _merge(report: Report, part: Report) -> None:
    report.trails_checked += part.trails_checked
    report.records_checked += part.records_checked
    report.records_covered += part.records_covered
    report.jobs_checked += part.jobs_checked
    report.ledger_entries_checked += part.ledger_entries_checked
    report.trails_anchored += part.trails_anchored
    report.failures.extend(part.failures)
    for note in part.notes:
        _note(report, note)


def _usable_point(report: Report) -> anchored.Point | None:
    point, problem = anchored.latest_point()
    if problem:
        report.failures.append(chain.Failure("verification", None, None, problem))
    elif point is None:
        _note(report, _NO_POINT)
    return point


_NO_POINT = (
    "every record walked: no verified point to start from (the first run, a full run, "
    "or a store without PostgreSQL's row versions)"
)


def _anchored_trails(
    point: anchored.Point, sealed: dict, sealed_at: dict, counts: dict
) -> tuple[dict[str, int], list[str]]:
    """Of the trails with records (`counts`), those sealed under the point that no write
    touched since and that hold the records their leaf sealed (with their record counts), and
    the others, which are walked."""
    fixed = {}
    for trail_id, (count, changed) in counts.items():
        payload = sealed.get(trail_id)
        if (
            payload is not None
            and sealed_at[trail_id] < point.size
            and not changed
            and count == payload.get("records")
        ):
            fixed[trail_id] = count
    return fixed, sorted(counts.keys() - fixed.keys())


def _records_to_walk(to_walk: list[str] | None, shard: _Shard):
    """(trail id, its (record, kind) pairs) for each trail of `to_walk` (None: every trail
    with records in the shard, in one streamed pass)."""
    rows = DecisionRecord.objects.order_by("trail_id", "seq", "id")
    if to_walk is None:
        yield from groupby(_stored(shard.of(rows)), key=lambda record: record[0].trail_id)
        return
    for start in range(0, len(to_walk), _WALK_BATCH):
        chunk = to_walk[start : start + _WALK_BATCH]
        yield from groupby(
            _stored(rows.filter(trail_id__in=chunk)), key=lambda record: record[0].trail_id
        )


def _anchored_walks(
    fixed: dict[str, int], trails: dict, sealed: dict, report: Report, shard, erased: set[str]
):
    """Each anchored trail as its earlier walk left it (its sealed length and head), with its
    request and answer records read again for the job-row checks: one pass over those records
    alone (an index of their own), not over the decisions between them."""
    if not fixed:
        return
    bound = shard.of(
        DecisionRecord.objects.exclude(kind=DecisionRecord.Kind.DECISION)
        .order_by("trail_id", "seq")
        .values_list(uuid_text("trail_id"), "kind", "payload")
    )
    seen: set[str] = set()
    for trail_value, rows in groupby(bound.iterator(chunk_size=_CHUNK), key=lambda row: row[0]):
        trail_id = canonical(trail_value)
        if trail_id in fixed:
            seen.add(trail_id)
            yield _anchored(
                trail_id,
                {kind: payload for _, kind, payload in rows},
                fixed,
                trails,
                sealed,
                report,
                erased,
            )
    for trail_id in fixed.keys() - seen:  # a v1 trail: no request or answer records
        yield _anchored(trail_id, {}, fixed, trails, sealed, report, erased)


def _anchored(trail_id, bound: dict, fixed, trails, sealed, report: Report, erased) -> _Walked:
    trail, leaf = trails.get(trail_id), sealed[trail_id]
    contents = binding.Contents(trail_id, leaf.get("v", 1))
    if binding.REQUEST in bound:
        contents.request = orjson.loads(bound[binding.REQUEST])
    if binding.ANSWER in bound:
        contents.answer = orjson.loads(bound[binding.ANSWER])
    summary = chain.TrailSummary(trail_id, fixed[trail_id], leaf.get("head", ""))
    report.trails_checked += 1
    report.records_covered += fixed[trail_id]
    if trail is not None:
        if (trail.record_count, trail.head_hash) != (summary.record_count, summary.head_hash):
            report.failures.append(
                chain.Failure("trail", trail_id, None, "trail row's head differs from its leaf")
            )
        if contents.request is not None:
            report.failures.extend(_request_against_row(contents.request, trail))
    return _Walked(trail, summary, contents, trail_id in erased)


def _walk(trail_id: str, trail: Trail | None, records, report: Report, erased) -> _Walked:
    """Stream one trail's (record, kind column) pairs through the chain and contents checks.
    An erased trail's decisions are walked as a bundle that opens none of them."""
    format_version = trail.format_version if trail is not None else 1
    is_erased = trail_id in erased
    salt = trail.salt if trail is not None and not is_erased else None
    contents = binding.Contents(trail_id, format_version, trail_salt=salt)
    sealed = format_version >= sealing.SEALED_SINCE

    def observed() -> Iterator[chain.StoredRecord]:
        for record, kind, openings in records:
            try:
                payload = orjson.loads(record.payload)
            except ValueError:
                payload = None  # the chain check names it: not canonical JSON
            stored = None
            if sealed and kind == binding.DECISION and not is_erased:
                stored = _stored_values(openings)
            contents.observe(record.seq, payload, stored_values=stored)
            if kind != binding.kind_of(payload):
                contents.fail(record.seq, f"kind column says {kind!r}, the payload another")
            yield record

    summary = chain.verify_trail(trail_id, observed())
    outcome = trail.outcome if trail is not None and trail.status == Trail.Status.SEALED else None
    report.trails_checked += 1
    report.records_checked += summary.record_count
    report.records_covered += summary.record_count
    report.failures.extend(summary.failures)
    report.failures.extend(contents.finish(sealed_outcome=outcome))
    if trail is not None and contents.request is not None:
        report.failures.extend(_request_against_row(contents.request, trail))
    if trail is not None and format_version >= 2 and not trail.salt and not is_erased:
        report.failures.append(
            chain.Failure("trail", trail_id, None, "the trail's salt is missing")
        )
    return _Walked(trail, summary, contents, is_erased)


def _erased(erasures) -> set[str]:
    """The trail ids (text) of these Erasure rows."""
    return {canonical(value) for value in erasures.values_list(uuid_text("trail_id"), flat=True)}


def _stored_values(openings: str) -> dict:
    """A format-3 decision row's slot values ({} when missing or unreadable: the walk fails
    the record for them)."""
    try:
        values = orjson.loads(openings) if openings else {}
    except ValueError:
        return {}
    return values if isinstance(values, dict) else {}


def _request_against_row(request: dict, trail: Trail) -> list[chain.Failure]:
    """The trail row's job, attempt and previous trail are the ones its request record names."""
    row = {
        "job": str(trail.job_id),
        "attempt": trail.attempt,
        "previous_trail": str(trail.previous_id) if trail.previous_id else None,
    }
    return [
        chain.Failure("trail", str(trail.id), 0, f"trail row's {name} differs from its request")
        for name, value in row.items()
        if request.get(name) != value
    ]


def _claims_batch(batch: list[_Walked], walked: _Walked, report: Report) -> list[_Walked]:
    batch.append(walked)
    if len(batch) < _CLAIM_BATCH:
        return batch
    _check_claims(batch, report)
    return []


def _check_claims(walked: list[_Walked], report: Report) -> None:
    """Each job row against the trail it points at; each served answer against a job row."""
    source = claims.source()
    if source is None:
        _note(report, "no claims source is registered: job rows were not checked")
        return
    by_trail = {w.contents.trail_id: w for w in walked}
    claimed: dict[str, set[str]] = {}
    for claim in source.for_trails(by_trail.keys()):
        report.jobs_checked += 1
        w = by_trail[claim.trail_id]
        claimed.setdefault(claim.trail_id, set()).add(claim.job_id)
        if claim.destroyed != w.erased:
            report.failures.append(
                chain.Failure(
                    "job",
                    claim.trail_id,
                    None,
                    f"job {claim.job_id}: its row says destroyed but no erasure records it"
                    if claim.destroyed
                    else f"job {claim.job_id}: its trail was erased but its row was not destroyed",
                )
            )
            continue
        if w.contents.format_version < 2:
            _note(report, "v1 trails bind no request or answer: their job rows were not checked")
            continue
        salt = w.trail.salt if w.trail is not None else ""
        if not salt and not claim.destroyed:
            continue  # the walk named it
        report.failures.extend(binding.claim_failures(claim, w.contents, salt))
    for trail_id, w in by_trail.items():
        request, answer = w.contents.request, w.contents.answer
        job_id = request.get("job") if request is not None else None
        if answer is not None and job_id not in claimed.get(trail_id, set()):
            report.failures.append(
                chain.Failure(
                    "job",
                    trail_id,
                    None,
                    f"job {job_id} does not point at the trail that recorded its answer",
                )
            )


def _check_pointers(report: Report) -> None:
    source = claims.source()
    if source is None:
        return
    for job_id, trail_id in source.dangling():
        report.failures.append(
            chain.Failure("job", trail_id, None, f"job {job_id} points at a missing trail")
        )


def _note(report: Report, note: str) -> None:
    if note not in report.notes:
        report.notes.append(note)


def _matter_keys() -> dict[str, str]:
    return dict(MatterKey.objects.values_list("matter", "key"))


def _tag_failures(
    sealed: dict, request: dict | None, trail: Trail | None, keys: dict[str, str]
) -> list[chain.Failure]:
    """A tagged leaf carries the tag of its request record's matter (null without a request): a
    wrong tag would hide the trail from that matter's completeness check; a leaf of matter
    format 3 also the request's submission time and the batch tag of the trail row's batch,
    which a matter bundle's selection is held to (audit.evidence.matter_leaves)."""
    if "matter_tag" not in sealed:
        return []  # sealed before the tags
    trail_id = sealed.get("trail")
    matter = request.get("matter") if request is not None else None
    key = keys.get(matter) if matter is not None else None
    failures = []
    if sealed["matter_tag"] != (matter_leaves.matter_tag(key, trail_id) if key else None):
        failures.append(
            "the sealed leaf's matter_tag is not the tag of its request record's matter"
        )
    if "submitted_at" in sealed:
        if sealed["submitted_at"] != (request.get("submitted_at") if request else None):
            failures.append("the sealed leaf's submitted_at is not its request record's")
        if trail is not None and sealed["batch_tag"] != (
            matter_leaves.batch_tag(key, trail_id, trail.batch_id) if key else None
        ):
            failures.append("the sealed leaf's batch_tag is not the tag of its trail's batch")
    return [chain.Failure("trail", trail_id, None, reason) for reason in failures]


def _leaf_against_row(payload: dict, trail: Trail | None) -> list[chain.Failure]:
    """The trail row's format version and outcome are the leaf's (the leaf is what is signed)."""
    if trail is None:
        return []
    trail_id = str(trail.id)
    failures = []
    if payload.get("job") != str(trail.job_id):
        failures.append(chain.Failure("trail", trail_id, None, "the sealed leaf names another job"))
    if payload.get("v") != trail.format_version:
        failures.append(
            chain.Failure(
                "trail",
                trail_id,
                None,
                f"trail row says format v{trail.format_version}, its "
                f"sealed leaf v{payload.get('v')}",
            )
        )
    if trail.status != Trail.Status.SEALED or payload.get("outcome") != trail.outcome:
        failures.append(
            chain.Failure("trail", trail_id, None, "trail row's seal differs from its ledger leaf")
        )
    return failures


def _check_head(
    trail_id: str, walked: _Walked, ledger_payload: str | None, report: Report, keys: dict
):
    trail, summary = walked.trail, walked.summary
    if ledger_payload is not None:
        present = trail is not None or summary.record_count > 0
        sealed_as = json.loads(ledger_payload)
        report.failures.extend(chain.check_sealed_trail(sealed_as, summary if present else None))
        report.failures.extend(_leaf_against_row(sealed_as, trail))
        report.failures.extend(_tag_failures(sealed_as, walked.contents.request, trail, keys))
    elif trail is None:
        report.failures.append(chain.Failure("trail", trail_id, None, "trail is missing"))
    else:
        _check_open(trail_id, summary, trail, report)


def _check_open(trail_id: str, summary: chain.TrailSummary, trail: Trail, report: Report):
    """A trail with no ledger leaf: open, and its head as its records recompute it."""
    if trail.status == Trail.Status.SEALED:
        report.failures.append(
            chain.Failure("trail", trail_id, None, "trail is sealed but has no ledger entry")
        )
    elif trail.record_count != summary.record_count:
        report.failures.append(
            chain.Failure(
                "trail",
                trail_id,
                min(trail.record_count, summary.record_count),
                f"trail has {summary.record_count} records; its head says {trail.record_count}",
            )
        )
    elif trail.head_hash != summary.head_hash:
        report.failures.append(
            chain.Failure("trail", trail_id, summary.record_count - 1, "head hash differs")
        )


class _Inclusions:
    """Each sealed leaf's proof under the newest valid signed checkpoint that covers it, for
    many trails at once: the newest checkpoint is found, its signature and cosignatures checked
    and its tiles read once, not once a trail."""

    def __init__(self):
        self._newest: Checkpoint | None = None
        self._looked = False
        self._trees: dict[int, tuple[checkpoints.Checkpoint, WitnessStatus, Tiles]] = {}

    def checkpoint_for(self, entry: LedgerEntry) -> Checkpoint:
        """audit.log.checkpoint_covering, read once: the newest valid checkpoint is the newest
        covering a leaf whenever it is large enough (a newer covering one would be newer)."""
        if not self._looked:
            self._newest, self._looked = latest_checkpoint(log_size()), True
        if self._newest is not None and self._newest.tree_size > entry.seq:
            return self._newest
        return checkpoint_covering(entry)  # raises NotYetCovered

    def tree(self, checkpoint: Checkpoint) -> tuple[checkpoints.Checkpoint, WitnessStatus, Tiles]:
        """The checkpoint's verified note, its witnesses' standing and its tiles."""
        if checkpoint.id not in self._trees:
            self._trees[checkpoint.id] = (
                verify_note(checkpoint.note),
                witness_status(checkpoint),
                Tiles(checkpoint.tree_size),
            )
        return self._trees[checkpoint.id]


def _check_inclusion(entry: LedgerEntry, report: Report, inclusions: _Inclusions) -> None:
    """Is the sealed leaf in the log under the newest valid signed checkpoint covering it, and
    do that checkpoint's witness cosignatures hold?"""
    trail_id = str(entry.trail_id)
    try:
        checkpoint = inclusions.checkpoint_for(entry)
        signed, witnesses, tiles = inclusions.tree(checkpoint)
        proof = tiles.inclusion_proof(entry.seq)
    except NotYetCovered:
        _note(report, f"no valid signed checkpoint covers trail {trail_id} yet")
        return
    except LogIncomplete as exc:
        report.failures.append(chain.Failure("ledger", trail_id, None, str(exc)))
        return
    if witnesses.error:
        report.failures.append(
            chain.Failure(
                "checkpoint", trail_id, None, f"checkpoint {checkpoint.id}: {witnesses.error}"
            )
        )
    elif not witnesses.ok:
        _note(
            report,
            f"checkpoint {checkpoint.id} has {witnesses.cosigned} of the {witnesses.quorum} "
            "witness cosignatures the quorum needs",
        )
    leaf = merkle.leaf_hash(entry.payload.encode("utf-8"))
    if not merkle.verify_inclusion(entry.seq, signed.size, leaf, proof, signed.root):
        report.failures.append(
            chain.Failure(
                "ledger",
                trail_id,
                None,
                f"ledger leaf {entry.seq} does not prove into the root of checkpoint "
                f"{checkpoint.id} (size {signed.size})",
            )
        )
    report.checkpoint_id, report.checkpoint_size = checkpoint.id, signed.size


def _ledger_entries(leaves: list[bytes]) -> Iterator[chain.StoredLedgerEntry]:
    """Stream the ledger, keeping each payload as a leaf of the Merkle log on the way."""
    rows = LedgerEntry.objects.order_by("seq", "id").values_list(
        "seq", "prev_hash", "entry_hash", "payload"
    )
    for seq, prev_hash, entry_hash, payload in rows.iterator(chunk_size=_CHUNK):
        leaves.append(payload.encode("utf-8"))
        yield chain.StoredLedgerEntry(seq, prev_hash, entry_hash, payload)


def _sealed(entries) -> tuple[dict[str, dict], dict[str, int]]:
    """Each sealed trail's leaf (by the trail it names), and its place in the ledger (an
    entry that is not JSON is left out here; the ledger's own check names it)."""
    sealed: dict[str, dict] = {}
    sealed_at: dict[str, int] = {}
    for seq, text in entries.values_list("seq", "payload").iterator(chunk_size=_CHUNK):
        try:
            payload = orjson.loads(text)
        except orjson.JSONDecodeError:
            continue
        if isinstance(payload, dict):
            trail_id = payload.get("trail")
            sealed[trail_id], sealed_at[trail_id] = payload, seq
    return sealed, sealed_at


def _ledger_link_failures(entry: LedgerEntry, previous: LedgerEntry | None) -> list[chain.Failure]:
    """One leaf's own link: its hash, and that it extends the entry before it (`previous`, the
    entry of the seq before, None when there is none)."""
    expected_prev = previous.entry_hash if previous else chain.ledger_genesis_hash()
    stored = chain.StoredLedgerEntry(entry.seq, entry.prev_hash, entry.entry_hash, entry.payload)
    failures = []
    if entry.seq > 0 and previous is None:
        failures.append(chain.Failure("ledger", None, entry.seq - 1, "ledger entry missing"))
    elif entry.prev_hash != expected_prev:
        failures.append(chain.Failure("ledger", None, entry.seq, "prev_hash does not match"))
    if chain.ledger_entry_hash(stored.seq, stored.prev_hash, stored.payload) != stored.entry_hash:
        failures.append(chain.Failure("ledger", None, entry.seq, "entry_hash does not match"))
    return failures


def _stored(records) -> Iterator[tuple[chain.StoredRecord, str, str]]:
    """(record, its kind column, its openings column) in the order of `records`."""
    fields = ("trail_id", "seq", "kind", "prev_hash", "record_hash", "payload", "openings")
    for record in records.only(*fields).iterator(chunk_size=_CHUNK):
        yield (
            chain.StoredRecord(
                str(record.trail_id),
                record.seq,
                record.prev_hash,
                record.record_hash,
                record.payload,
            ),
            record.kind,
            record.openings,
        )


@contextmanager
def _snapshot():
    """One consistent snapshot for the whole verification (REPEATABLE READ on PostgreSQL)."""
    # Inside an enclosing transaction (a test's) the snapshot is that transaction's own.
    fresh = not connection.in_atomic_block
    with transaction.atomic():
        if fresh and connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
        yield


def _recorded(report: Report, started, point=None) -> Report:
    """Store the run; a run of everything that found it intact also leaves its verified point
    (the checkpoint it verified, the snapshot it read), under its MAC."""
    checkpoint, xmin = point if point else (None, None)
    VerificationRun.objects.create(
        scope=report.scope[:200],
        ok=report.ok,
        trails_checked=report.trails_checked,
        records_checked=report.records_checked,
        records_covered=report.records_covered,
        anchored_size=checkpoint.tree_size if checkpoint else None,
        anchored_root=checkpoint.root_hash if checkpoint else "",
        snapshot_xmin=xmin,
        point_mac=anchored.point_mac(checkpoint.tree_size, checkpoint.root_hash, xmin)
        if checkpoint
        else "",
        ledger_entries_checked=report.ledger_entries_checked,
        failures=[failure.as_dict() for failure in report.failures[:1000]],
        started_at=started,
        finished_at=timezone.now(),
    )
    return report

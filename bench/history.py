"""A synthetic audit history: many sealed format-2 trails with their job rows, ledger, tiles and
custody events, written into a bench database of its own, for benchmarks that need a large store.

One real job is decoded on the stub model (its request, decisions and answer as the worker
writes them); each synthetic job is a copy with its own ids and salt, its request and answer
records made again by audit.evidence.binding for that job, its decisions renamed to it, and every
chain
hash computed as audit.store would, so `verify_chain --all` checks it as real history. Rows go
in by bulk INSERT through the append-only triggers (which still check every chain link), with
no ledger lock: nothing else writes the bench database.
"""

from __future__ import annotations

import secrets
import time
import uuid

BATCH = 1000  # trails per bulk insert


def build_history(*, trails: int, records_per_trail: int, custody_events: int) -> dict:
    """Write the history (Django set up on the bench database); returns what was written."""
    from django.db import transaction

    started = time.perf_counter()
    template = _template_job(records_per_trail)
    with transaction.atomic():
        reviewer = _reviewer(template.matter)
    written = 0
    while written < trails:
        count = min(BATCH, trails - written)
        with transaction.atomic():
            _write_batch(template, count)
        written += count
    with transaction.atomic():
        _write_custody(reviewer, template, custody_events)
    _analyze()
    return {
        "trails": trails,
        "records": _count_records(),
        "custody_events": custody_events,
        "reviewer": reviewer.username,
        "build_s": round(time.perf_counter() - started, 1),
    }


def _template_job(records_per_trail: int):
    from decoding.models import GenerationJob, Matter
    from decoding.services import api_key_create, job_submit
    from decoding.worker.execution import job_run

    key, _ = api_key_create(matter_name="History v. Bench", name="history")
    job, _ = job_submit(
        matter=Matter.objects.get(name="History v. Bench"),
        api_key=key,
        model="stub",
        prompt_token_ids=[1, 2, 3, 4],
        max_tokens=records_per_trail - 2,  # the request and answer records around the steps
        temperature=0.0,
        seed=1,
        draft_length=0,
        eos_token_id=None,
        enqueue=False,
    )
    job_run(job_id=job.id)
    job.refresh_from_db()
    assert job.status == GenerationJob.Status.SUCCEEDED, job.error
    return job


def _reviewer(matter):
    from django.contrib.auth import get_user_model

    from reviewers.models import MatterGrant

    user, _ = get_user_model().objects.get_or_create(username="history-reviewer")
    MatterGrant.objects.get_or_create(user=user, matter=matter)
    return user


def _write_batch(template, count: int) -> None:
    from audit.evidence import binding, chain
    from audit.models import DecisionRecord, LedgerEntry, Trail
    from audit.selectors import trail_clear_decisions
    from audit.store import sealed_decision
    from decoding.models import GenerationJob

    decisions = trail_clear_decisions(trail_id=template.trail_id)
    answer = binding.Answer(
        token_ids=tuple(template.output_token_ids),
        text=template.output_text,
        stop_reason=template.stop_reason,
    )
    jobs, trails, records = [], [], []
    for _ in range(count):
        job = GenerationJob(
            **{
                f.attname: getattr(template, f.attname)
                for f in GenerationJob._meta.concrete_fields
                if f.attname not in ("id", "request_id", "trail_id", "created_at")
            }
        )
        job.id = uuid.uuid4()
        trail = Trail(
            id=uuid.uuid4(),
            job_id=job.id,
            attempt=1,
            format_version=binding.FORMAT_VERSION,
            salt=secrets.token_hex(32),
            status=Trail.Status.OPEN,
        )
        trail.genesis_hash = chain.genesis_hash(str(trail.id))
        job.trail_id = trail.id
        payloads = [
            job_request_payload_for(job, trail, template),
            *({**d, "request_id": str(job.id)} for d in decisions),
            binding.answer_payload(trail_salt=trail.salt, answer=answer, steps=template.steps),
        ]
        prev = trail.genesis_hash
        for seq, payload in enumerate(payloads):
            text, openings = chain.canonical_json(payload), ""
            if binding.kind_of(payload) == binding.DECISION:
                text, openings = sealed_decision(payload, trail.salt)
            record_hash = chain.record_hash(str(trail.id), seq, prev, text)
            records.append(
                DecisionRecord(
                    trail_id=trail.id,
                    seq=seq,
                    kind=binding.kind_of(payload),
                    payload=text,
                    openings=openings,
                    prev_hash=prev,
                    record_hash=record_hash,
                )
            )
            prev = record_hash
        trail.record_count, trail.head_hash = len(payloads), prev
        jobs.append(job)
        trails.append(trail)
    GenerationJob.objects.bulk_create(jobs, batch_size=BATCH)
    heads = {t.id: (t.record_count, t.head_hash) for t in trails}
    for trail in trails:  # inserted open, with no records yet, as trail_open leaves them
        trail.record_count, trail.head_hash = 0, trail.genesis_hash
    Trail.objects.bulk_create(trails, batch_size=BATCH)
    DecisionRecord.objects.bulk_create(records, batch_size=5000)
    for trail in trails:
        trail.record_count, trail.head_hash = heads[trail.id]
    Trail.objects.bulk_update(trails, ["record_count", "head_hash"], batch_size=BATCH)
    last = LedgerEntry.objects.order_by("-seq").only("seq", "entry_hash").first()
    seq = last.seq + 1 if last else 0
    prev_hash = last.entry_hash if last else chain.ledger_genesis_hash()
    entries = []
    for trail in trails:
        payload = chain.ledger_payload(
            format_version=trail.format_version,
            trail_id=str(trail.id),
            job_id=str(trail.job_id),
            record_count=trail.record_count,
            head_hash=trail.head_hash,
            outcome=Trail.Outcome.SUCCEEDED,
        )
        entry_hash = chain.ledger_entry_hash(seq, prev_hash, payload)
        entries.append(
            LedgerEntry(
                seq=seq,
                trail_id=trail.id,
                payload=payload,
                prev_hash=prev_hash,
                entry_hash=entry_hash,
            )
        )
        seq, prev_hash = seq + 1, entry_hash
    LedgerEntry.objects.bulk_create(entries, batch_size=BATCH)
    from django.utils import timezone

    Trail.objects.filter(pk__in=[t.id for t in trails]).update(
        status=Trail.Status.SEALED, outcome=Trail.Outcome.SUCCEEDED, sealed_at=timezone.now()
    )


def job_request_payload_for(job, trail, template) -> dict:
    """The request record the worker would write for this job (decoding.claims), with the
    template's models."""
    from decoding.claims import job_request_payload
    from decoding.worker import runtime

    models, _ = runtime.models_for(template.model_spec)
    return job_request_payload(job, trail, models)


def _write_custody(user, template, count: int) -> None:
    """`count` view events, chained as reviewers.services.custody_append chains them."""
    from django.utils import timezone

    from audit.evidence.chain import canonical_json
    from reviewers import custody
    from reviewers.models import CustodyEvent

    last = CustodyEvent.objects.order_by("-seq").only("seq", "event_hash").first()
    seq = last.seq + 1 if last else 0
    prev = last.event_hash if last else custody.custody_genesis_hash()
    events = []
    for _ in range(count):
        at = timezone.now()
        detail = {"step": None}
        payload = custody.custody_payload(
            action="view",
            user_id=user.pk,
            username=user.get_username(),
            job_id=str(template.id),
            trail_id=str(template.trail_id),
            detail=detail,
            at=at,
        )
        event_hash = custody.custody_event_hash(seq, prev, payload)
        events.append(
            CustodyEvent(
                seq=seq,
                user=user,
                action="view",
                job_id=str(template.id),
                trail_id=str(template.trail_id),
                detail=canonical_json(detail),
                payload=payload,
                created_at=at,
                prev_hash=prev,
                event_hash=event_hash,
            )
        )
        seq, prev = seq + 1, event_hash
    CustodyEvent.objects.bulk_create(events, batch_size=5000)


def _analyze() -> None:
    """Planner statistics for the new rows, as autovacuum would gather them soon after."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")


def _count_records() -> int:
    from audit.models import DecisionRecord

    return DecisionRecord.objects.count()

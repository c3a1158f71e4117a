"""Writes of the portal. Each reviewer action is recorded in the custody log in the same
transaction as what it wrote."""

from __future__ import annotations

import hashlib
import os
import tempfile
from dataclasses import dataclass

from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone
from django.utils.text import slugify

from audit.evidence.chain import Failure
from audit.export import ExportError, trail_export
from audit.keys import SigningKeyMissing
from audit.models import LedgerEntry
from audit.receipts import NotYetCovered, TrailNotSealed, trail_receipt
from audit.verification import verify_trails
from decoding.fair_share import OverCapacity
from decoding.models import Batch, GenerationJob, Matter, Replay
from decoding.services import batch_bundle_export, matter_bundle_export, replay_request

from .custody_chain import custody_append, custody_view
from .models import Annotation, CustodyEvent, MatterGrant, SignOff, TrailVerification


class PortalRefusal(Exception):
    """An action that cannot be done on this job now; the message says why, for the reviewer.
    `status`: 409 (not now, for this job) or 429 (a cap on the reviewer, retry later)."""

    def __init__(self, message: str, status: int = 409):
        super().__init__(message)
        self.status = status


def trail_view_record(*, user, job: GenerationJob, step: int | None) -> None:
    custody_view(user=user, job=job, detail={"step": step})


def trail_verify(*, user, job: GenerationJob) -> TrailVerification:
    """Verify the job's trail with audit's one verification (chain, request and answer, the
    job row, the ledger leaf, inclusion under a signed checkpoint); store the verdict and log
    it. A reviewer's verification also needs the inclusion proven: a trail sealed after the
    newest checkpoint is not verified until beat has signed one."""
    if job.trail_id is None:
        raise PortalRefusal("this job has no audit trail yet: there is nothing to verify")
    report = verify_trails([job.trail_id], scope=f"trail {job.trail_id} (portal)")
    failures = list(report.failures)
    trail = str(job.trail_id)
    if not LedgerEntry.objects.filter(trail_id=job.trail_id).exists():
        failures.append(Failure("ledger", trail, None, "the trail is not sealed into the log"))
    elif report.checkpoint_size is None:
        failures.append(
            Failure(
                "checkpoint",
                trail,
                None,
                "no signed checkpoint covers the trail yet; beat "
                "signs one within a minute or so: verify again then",
            )
        )
    with transaction.atomic():
        verification = TrailVerification.objects.create(
            job=job,
            trail_id=job.trail_id,
            ok=not failures,
            first_failure=str(failures[0]) if failures else "",
            checkpoint_size=report.checkpoint_size,
            user=user,
            at=timezone.now(),
        )
        custody_append(
            user=user,
            action=CustodyEvent.Action.VERIFY,
            job=job,
            detail={
                "verification": verification.pk,
                "ok": verification.ok,
                "records": report.records_checked,
                "failures": len(failures),
                "first_failure": verification.first_failure or None,
                "checkpoint": report.checkpoint_id,
                "checkpoint_size": report.checkpoint_size,
            },
        )
    return verification


def replay_start(*, user, job: GenerationJob) -> Replay:
    """Queue a replay of the job on a worker (on commit) and log the request."""
    with transaction.atomic():
        try:
            replay = replay_request(job=job, user=user)
        except ValueError as exc:
            raise PortalRefusal(str(exc)) from exc
        except OverCapacity as exc:
            raise PortalRefusal(str(exc), status=429) from exc
        custody_append(
            user=user,
            action=CustodyEvent.Action.REPLAY,
            job=job,
            detail={"replay": str(replay.id)},
        )
    return replay


@dataclass
class Bundle:
    handle: object  # an open binary file; its path is already unlinked
    filename: str
    size: int
    sha256: str


def _written(write, filename: str) -> tuple[Bundle, object]:
    """Run write(path) into an anonymous temporary file; the open file, its name, size and
    SHA-256, and what write returned."""
    descriptor, path = tempfile.mkstemp(prefix="pathfinder-", suffix=".zip")
    os.close(descriptor)
    try:
        try:
            result = write(path)
        except ExportError as exc:
            raise PortalRefusal(str(exc)) from exc
        handle = open(path, "rb")  # noqa: SIM115 - the response closes it
    finally:
        os.unlink(path)  # the open handle keeps the data until the response is sent
    digest = hashlib.sha256()
    for chunk in iter(lambda: handle.read(1 << 20), b""):
        digest.update(chunk)
    size = handle.tell()
    handle.seek(0)
    return Bundle(handle=handle, filename=filename, size=size, sha256=digest.hexdigest()), result


def bundle_export(*, user, job: GenerationJob) -> Bundle:
    """The trail's evidence bundle (audit.export), in an anonymous temporary file, and its
    custody event naming the bundle's SHA-256."""
    if job.trail_id is None:
        raise PortalRefusal("this job has no audit trail yet: there is nothing to export")
    bundle, _ = _written(
        lambda path: trail_export(trail_id=job.trail_id, out=path), f"pathfinder-{job.id}.zip"
    )
    custody_append(
        user=user,
        action=CustodyEvent.Action.EXPORT,
        job=job,
        detail={"filename": bundle.filename, "bytes": bundle.size, "sha256": bundle.sha256},
    )
    return bundle


def receipt_export(*, user, job: GenerationJob) -> tuple[bytes, str]:
    """The RFC 9942 receipt of the job's trail (audit.receipts) and its file name, and the
    custody event naming its SHA-256."""
    if job.trail_id is None:
        raise PortalRefusal("this job has no audit trail yet: there is nothing to prove")
    try:
        receipt = trail_receipt(job.trail_id)
    except (TrailNotSealed, NotYetCovered, SigningKeyMissing) as exc:
        raise PortalRefusal(f"no receipt yet: {exc}") from exc
    filename = f"pathfinder-{job.id}.receipt.cose"
    custody_append(
        user=user,
        action=CustodyEvent.Action.EXPORT,
        job=job,
        detail={
            "filename": filename,
            "bytes": len(receipt),
            "sha256": hashlib.sha256(receipt).hexdigest(),
        },
    )
    return receipt, filename


def matter_export(*, user, matter: Matter, since, until) -> Bundle:
    """The matter's bundle (decoding.services.matter_bundle_export) for a reviewer granted the
    matter, and its custody event naming the selection, every trail and the SHA-256."""
    if not MatterGrant.objects.filter(user=user, matter=matter).exists():
        raise PortalRefusal(f"you are not a reviewer of matter {matter.name!r}", status=403)
    days = "".join(f"-{day}" for day in (since, until) if day)
    bundle, export = _written(
        lambda path: matter_bundle_export(matter=matter, since=since, until=until, out=path),
        f"pathfinder-matter-{slugify(matter.name)}{days}.zip",
    )
    custody_append(
        user=user,
        action=CustodyEvent.Action.EXPORT_MATTER,
        detail={
            "matter": matter.name,
            "since": since.isoformat() if since else None,
            "until": until.isoformat() if until else None,
            "trails": export.trail_ids,
            "left_out": export.left_out,
            "tree_size": export.tree_size,
            "filename": bundle.filename,
            "bytes": bundle.size,
            "sha256": bundle.sha256,
        },
    )
    return bundle


def batch_export(*, user, batch: Batch) -> Bundle:
    """A batch produced as one matter bundle (decoding.services.batch_bundle_export), and its
    custody event naming the batch, every trail and the SHA-256."""
    if not MatterGrant.objects.filter(user=user, matter_id=batch.matter_id).exists():
        raise PortalRefusal(f"you are not a reviewer of matter {batch.matter.name!r}", status=403)
    bundle, export = _written(
        lambda path: batch_bundle_export(batch=batch, out=path), f"pathfinder-{batch.pk}.zip"
    )
    custody_append(
        user=user,
        action=CustodyEvent.Action.EXPORT_MATTER,
        detail={
            "matter": batch.matter.name,
            "batch": batch.pk,
            "trails": export.trail_ids,
            "left_out": export.left_out,
            "tree_size": export.tree_size,
            "filename": bundle.filename,
            "bytes": bundle.size,
            "sha256": bundle.sha256,
        },
    )
    return bundle


def annotation_create(*, user, job: GenerationJob, text: str, step: int | None) -> Annotation:
    with transaction.atomic():
        annotation = Annotation.objects.create(
            job=job, trail_id=job.trail_id, step=step, text=text, user=user
        )
        custody_append(
            user=user,
            action=CustodyEvent.Action.ANNOTATE,
            job=job,
            detail={"annotation": annotation.pk, "step": step, "text": text},
        )
    return annotation


def sign_off_create(*, user, job: GenerationJob) -> SignOff:
    """ "Reviewed and verified by NAME at TIME": the trail is verified afresh (a verification
    of its own, kept and logged), and signed off only if that verification is ok."""
    if job.trail_id is None:
        raise PortalRefusal("Sign-off refused: this job has no audit trail yet.")
    verification = trail_verify(user=user, job=job)
    if not verification.ok:
        raise PortalRefusal(
            f"Sign-off refused: verifying the trail found it broken ({verification.first_failure})."
        )
    with transaction.atomic():
        sign_off = SignOff.objects.create(
            job=job, trail_id=job.trail_id, verification=verification, user=user, at=timezone.now()
        )
        custody_append(
            user=user,
            action=CustodyEvent.Action.SIGN_OFF,
            job=job,
            detail={"sign_off": sign_off.pk, "verification": verification.pk},
        )
    return sign_off


def reviewer_upsert(
    *, username: str, password: str | None, matter_names: list[str]
) -> tuple[object, bool, list[Matter]]:
    """Create or update a reviewer and grant the named matters (creating missing matters).
    A new user without a password gets an unusable one."""
    User = get_user_model()
    with transaction.atomic():
        user, created = User.objects.get_or_create(username=username)
        if password:
            user.set_password(password)
        elif created:
            user.set_unusable_password()
        user.save()
        matters = []
        for name in matter_names:
            matter, _ = Matter.objects.get_or_create(name=name)
            MatterGrant.objects.get_or_create(user=user, matter=matter)
            matters.append(matter)
    return user, created, matters

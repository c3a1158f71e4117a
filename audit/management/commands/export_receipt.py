import uuid
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from audit.evidence import receipts
from audit.keys import SigningKeyMissing
from audit.models import Trail
from audit.receipts import NotYetCovered, ReceiptFailed, TrailNotSealed, trail_receipt


class Command(BaseCommand):
    help = (
        "Write the RFC 9942 COSE Receipt of a job's latest trail: its leaf's inclusion in the "
        "newest signed checkpoint covering it, signed with the log key (ADR 0030)."
    )

    def add_arguments(self, parser):
        parser.add_argument("--job", required=True, help="the generation job's id")
        parser.add_argument("--out", required=True, help="the file to write (COSE_Sign1 bytes)")

    def handle(self, *args, **options):
        try:
            job_id = uuid.UUID(options["job"])
        except ValueError as exc:
            raise CommandError(f"job: {options['job']!r} is not a job id (a UUID)") from exc
        out = Path(options["out"])
        if not out.parent.is_dir():
            raise CommandError(f"out: the directory {out.parent} does not exist")
        if out.is_dir():
            raise CommandError(f"out: {out} is a directory")
        trail = Trail.objects.filter(job_id=job_id).order_by("-attempt").first()
        if trail is None:
            raise CommandError(f"job: job {job_id} has no audit trail")
        if trail.status != Trail.Status.SEALED:
            raise CommandError(
                f"job: the latest trail of job {job_id} ({trail.id}, attempt {trail.attempt}) "
                "is still open; a receipt proves a sealed trail"
            )
        try:
            receipt = trail_receipt(trail.id)
        except (TrailNotSealed, NotYetCovered, ReceiptFailed) as exc:
            raise CommandError(f"job: {exc}") from exc
        except SigningKeyMissing as exc:
            raise CommandError(str(exc)) from exc
        out.write_bytes(receipt)
        stated = receipts.decode_receipt(receipt)
        self.stdout.write(
            f"Wrote the receipt of trail {trail.id} (job {job_id}, attempt {trail.attempt}) to "
            f"{out}: {len(receipt)} bytes, leaf index {stated.leaf_index} of a tree of "
            f"{stated.tree_size}, issuer {stated.issuer}, key id {stated.kid.hex()}."
        )
        self.stdout.write(
            "Verify it with any RFC 9942 verifier (vds RFC9162_SHA256, EdDSA): the leaf is the "
            "payload of ledger-leaf.json in the trail's bundle (manage.py export_trail), as UTF-8 "
            "bytes; the key is the Ed25519 key of the log's verifier key (manage.py "
            "verifier_key), whose key id is the receipt's kid; the root it proves is the one "
            f"the published checkpoint-{stated.tree_size}.txt signs (docs/audit-format.md, "
            '"COSE Receipts").'
        )

import sys
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from audit.keys import SigningKeyMissing, signing_key
from audit.locks import run_exclusively
from audit.log import LogInconsistent, checkpoint_create, witness_status
from audit.publish import PublishConflict, published_path


class Command(BaseCommand):
    help = (
        "Sign a checkpoint of the global log (size and Merkle root), have the witnesses cosign "
        "it and the time-stamping authority stamp it, publish it, and print it. Run it where the "
        "signing key is."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--out", type=Path, help="also write checkpoint-<size>.txt to this directory"
        )
        parser.add_argument(
            "--verifier-key", action="store_true", help="also print the key auditors should pin"
        )

    def handle(self, *args, **options):
        try:
            # Under beat's lock, so the command and beat never sign the same size side by side.
            checkpoint = run_exclusively("audit.create_checkpoint", 300, checkpoint_create)
        except (SigningKeyMissing, PublishConflict, LogInconsistent) as exc:
            raise CommandError(str(exc)) from exc
        if checkpoint is None:
            raise CommandError("another checkpoint is being signed right now; try again")
        if options["out"]:
            options["out"].mkdir(parents=True, exist_ok=True)
            path = options["out"] / f"checkpoint-{checkpoint.tree_size}.txt"
            path.write_text(checkpoint.note, encoding="utf-8")
            self.stderr.write(f"Wrote {path}.")
        else:
            sys.stdout.write(checkpoint.note)
        self.stderr.write(f"Published {published_path(checkpoint.tree_size)}.")
        status = witness_status(checkpoint)
        if not status.ok:
            self.stderr.write(
                self.style.ERROR(
                    f"ALERT: {status.cosigned} witness cosignature(s), the quorum is "
                    f"{status.quorum}."
                )
            )
        if options["verifier_key"]:
            self.stderr.write(f"Verifier key: {signing_key().verifier}")

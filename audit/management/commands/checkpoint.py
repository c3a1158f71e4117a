import sys
from pathlib import Path

from django.core.management.base import BaseCommand

from audit.log import checkpoint_create, signing_key


class Command(BaseCommand):
    help = (
        "Sign a checkpoint of the global log (size and Merkle root) and print it, or write it "
        "to a directory. Checkpoints are meant to leave the database."
    )

    def add_arguments(self, parser):
        parser.add_argument("--out", type=Path, help="directory to write checkpoint-<size>.txt to")
        parser.add_argument(
            "--verifier-key", action="store_true", help="also print the key auditors should pin"
        )

    def handle(self, *args, **options):
        checkpoint = checkpoint_create()
        if options["out"]:
            options["out"].mkdir(parents=True, exist_ok=True)
            path = options["out"] / f"checkpoint-{checkpoint.tree_size}.txt"
            path.write_text(checkpoint.note, encoding="utf-8")
            self.stderr.write(f"Wrote {path}.")
        else:
            sys.stdout.write(checkpoint.note)
        if options["verifier_key"]:
            self.stderr.write(f"Verifier key: {signing_key().verifier}")

from django.core.management.base import BaseCommand, CommandError

from audit.keys import SigningKeyMissing, verifier_keys


class Command(BaseCommand):
    help = (
        "Print the log's verifier key, the one examiners pin (then any retired ones, one per "
        "line), on stdout. Reads the configured keys only: signs nothing, changes nothing."
    )

    def handle(self, *args, **options):
        try:
            keys = verifier_keys()
        except SigningKeyMissing as exc:
            raise CommandError(str(exc)) from exc
        for key in keys:
            self.stdout.write(key)

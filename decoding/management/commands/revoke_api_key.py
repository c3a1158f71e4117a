from django.core.management.base import BaseCommand, CommandError

from decoding.models import ApiKey
from decoding.services import api_key_revoke


class Command(BaseCommand):
    help = "Revoke an API key, named by its matter and name or by its prefix; it stops at once."

    def add_arguments(self, parser):
        parser.add_argument("--matter", help="the key's matter (with its name)")
        parser.add_argument("key", help="the key's name within --matter, or its prefix (pf_...)")

    def handle(self, *args, **options):
        if options["matter"]:
            keys = ApiKey.objects.filter(matter__name=options["matter"], name=options["key"])
        else:
            keys = ApiKey.objects.filter(prefix=options["key"])
        keys = list(keys.select_related("matter")[:2])
        if not keys:
            raise CommandError(f"no API key matches {options['key']!r}")
        if len(keys) > 1:
            raise CommandError(f"several keys match {options['key']!r}: name one with --matter")
        key = keys[0]
        if api_key_revoke(key=key):
            self.stdout.write(f"Revoked API key {key.name!r} of matter {key.matter.name!r}.")
        else:
            self.stdout.write(
                f"API key {key.name!r} of matter {key.matter.name!r} was already revoked."
            )

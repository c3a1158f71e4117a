from django.core.management.base import BaseCommand, CommandError

from decoding.models import ApiKey
from decoding.services import api_key_create


class Command(BaseCommand):
    help = "Create an API key for a matter (creating the matter if needed); print the key last."

    def add_arguments(self, parser):
        parser.add_argument(
            "--matter", required=True, help="the matter (legal case) the key serves"
        )
        parser.add_argument("name", help="a name for the key, unique within the matter")

    def handle(self, *args, **options):
        if ApiKey.objects.filter(matter__name=options["matter"], name=options["name"]).exists():
            raise CommandError(
                f"matter {options['matter']!r} already has a key named {options['name']!r}"
            )
        key, raw_key = api_key_create(matter_name=options["matter"], name=options["name"])
        self.stdout.write(f"Created API key {key.name!r} for matter {key.matter.name!r}.")
        self.stdout.write("Store it now; it is not shown again:")
        self.stdout.write(raw_key)

import datetime as dt

from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from decoding.models import ApiKey
from decoding.services import api_key_create


class Command(BaseCommand):
    help = "Create an API key for a matter (creating the matter if needed); print the key last."

    def add_arguments(self, parser):
        parser.add_argument(
            "--matter", required=True, help="the matter (legal case) the key serves"
        )
        parser.add_argument(
            "--scope",
            action="append",
            choices=ApiKey.Scope.values,
            dest="scopes",
            help="what the key may do (repeat for several; default: all)",
        )
        parser.add_argument(
            "--expires-in-days", type=int, help="the key stops working after this many days"
        )
        parser.add_argument(
            "--owner",
            default="",
            help="who holds the key (a person, a firm): its jobs' request records name them",
        )
        parser.add_argument("name", help="a name for the key, unique within the matter")

    def handle(self, *args, **options):
        if ApiKey.objects.filter(matter__name=options["matter"], name=options["name"]).exists():
            raise CommandError(
                f"matter {options['matter']!r} already has a key named {options['name']!r}"
            )
        days = options["expires_in_days"]
        if days is not None and days < 1:
            raise CommandError("--expires-in-days must be at least 1")
        key, raw_key = api_key_create(
            matter_name=options["matter"],
            name=options["name"],
            scopes=options["scopes"],
            expires_at=timezone.now() + dt.timedelta(days=days) if days else None,
            owner=options["owner"],
        )
        expiry = f", expires {key.expires_at:%Y-%m-%d %H:%M} UTC" if key.expires_at else ""
        self.stdout.write(
            f"Created API key {key.name!r} for matter {key.matter.name!r} "
            f"(scopes: {', '.join(key.scopes)}{expiry})."
        )
        self.stdout.write("Store it now; it is not shown again:")
        self.stdout.write(raw_key)

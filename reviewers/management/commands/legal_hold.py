"""manage.py legal_hold MATTER --on --reason TEXT | --off: place or release a matter's legal hold,
each a custody event (reviewers.records)."""

from django.core.management.base import BaseCommand, CommandError

from reviewers.records import RecordsRefusal, acting_user, hold_off, hold_on, where_run


class Command(BaseCommand):
    help = (
        "Place (--on --reason TEXT) or release (--off) a matter's legal hold. While it is on, "
        "nothing of the matter is destroyed, by an order or by retention. Recorded in the "
        "custody log."
    )

    def add_arguments(self, parser):
        parser.add_argument("matter", help="the matter's name")
        switch = parser.add_mutually_exclusive_group(required=True)
        switch.add_argument("--on", action="store_true", help="place the hold")
        switch.add_argument("--off", action="store_true", help="release the hold")
        parser.add_argument("--reason", help="why (the order or notice); required with --on")
        parser.add_argument(
            "--by", help="the user to record it under (default: the service account)"
        )

    def handle(self, *args, **options):
        if options["off"] and options["reason"]:
            raise CommandError("reason: give it with --on; --off releases the hold as it is")
        try:
            user = acting_user(options["by"])
            if options["on"]:
                matter = hold_on(
                    matter_name=options["matter"],
                    reason=options["reason"] or "",
                    user=user,
                    run_by=where_run(),
                )
                self.stdout.write(
                    f"Legal hold on matter {matter.name!r} since "
                    f"{matter.hold_since:%Y-%m-%d %H:%M:%S} UTC: {matter.hold_reason}"
                )
            else:
                matter = hold_off(matter_name=options["matter"], user=user, run_by=where_run())
                self.stdout.write(f"Legal hold on matter {matter.name!r} released.")
        except RecordsRefusal as exc:
            raise CommandError(str(exc)) from exc

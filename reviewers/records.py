"""Records management of a matter: its legal hold and its retention period.

Each change is a custody event (reviewers.custody), written in the same transaction as the
change and under the matter row's lock, so a destruction (reviewers.destruction), which takes
the same lock, sees either the hold or its release, never half of one.
"""

from __future__ import annotations

import getpass
import socket

from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone

from decoding.models import Matter

from .custody_chain import custody_append
from .models import CustodyEvent

# The account beat's retention runs, and commands run without --by, are recorded under.
SERVICE_USERNAME = "pathfinder-records"


class RecordsRefusal(Exception):
    """A records act that cannot be done now; the message says why and changes nothing."""


def acting_user(username: str | None = None):
    """The user a records act is recorded under: the named one, else the service account
    (inactive, no password: it never logs in)."""
    User = get_user_model()
    if username:
        user = User.objects.filter(username=username).first()
        if user is None:
            raise RecordsRefusal(f"by: no user named {username!r}")
        return user
    user, created = User.objects.get_or_create(
        username=SERVICE_USERNAME, defaults={"is_active": False}
    )
    if created:
        user.set_unusable_password()
        user.save(update_fields=["password"])
    return user


def where_run() -> str:
    """Who ran a command, as the operating system knows them: recorded beside the user."""
    try:
        login = getpass.getuser()
    except (KeyError, OSError):
        login = "unknown"
    return f"{login}@{socket.gethostname()}"


def locked_matter(name: str) -> Matter:
    """The matter, its row locked for this transaction."""
    matter = Matter.objects.select_for_update().filter(name=name).first()
    if matter is None:
        raise RecordsRefusal(f"matter: no matter named {name!r}")
    return matter


def hold_on(*, matter_name: str, reason: str, user, run_by: str = "") -> Matter:
    """Place a legal hold: from now nothing of the matter is destroyed, by order or retention."""
    reason = reason.strip()
    if not reason:
        raise RecordsRefusal("reason: a legal hold needs its reason (the order or the notice)")
    with transaction.atomic():
        matter = locked_matter(matter_name)
        if matter.on_hold:
            raise RecordsRefusal(
                f"matter {matter.name!r} is already under a legal hold since "
                f"{matter.hold_since:%Y-%m-%d %H:%M} UTC ({matter.hold_reason})"
            )
        matter.hold_reason, matter.hold_since = reason, timezone.now()
        matter.hold_by = user.get_username()
        matter.save(update_fields=["hold_reason", "hold_since", "hold_by"])
        custody_append(
            user=user,
            action=CustodyEvent.Action.LEGAL_HOLD,
            detail={"matter": matter.name, "reason": reason, "run_by": run_by},
        )
    return matter


def hold_off(*, matter_name: str, user, run_by: str = "") -> Matter:
    """Release the matter's legal hold; retention and orders apply again from now."""
    with transaction.atomic():
        matter = locked_matter(matter_name)
        if not matter.on_hold:
            raise RecordsRefusal(f"matter {matter.name!r} is not under a legal hold")
        detail = {
            "matter": matter.name,
            "reason": matter.hold_reason,
            "held_since": matter.hold_since.isoformat(timespec="microseconds"),
            "run_by": run_by,
        }
        matter.hold_reason, matter.hold_since, matter.hold_by = "", None, ""
        matter.save(update_fields=["hold_reason", "hold_since", "hold_by"])
        custody_append(user=user, action=CustodyEvent.Action.RELEASE_HOLD, detail=detail)
    return matter


def retention_set(*, matter_name: str, days: int | None, user, run_by: str = "") -> Matter:
    """Set (or clear, with None) how many days after submission a job's content is destroyed."""
    if days is not None and days < 1:
        raise RecordsRefusal("retention_days: at least 1 day, or empty to keep content")
    with transaction.atomic():
        matter = locked_matter(matter_name)
        if matter.retention_days == days:
            return matter
        detail = {"matter": matter.name, "from": matter.retention_days, "to": days}
        matter.retention_days = days
        matter.save(update_fields=["retention_days"])
        custody_append(
            user=user, action=CustodyEvent.Action.RETENTION, detail={**detail, "run_by": run_by}
        )
    return matter

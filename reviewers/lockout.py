"""Who a failed login is, and how long it waits: django-axes' two policy hooks (settings.py).

A lockout is keyed by username and client address together, so a stranger's failures lock
out only that stranger's attempts: never the owner signing in from elsewhere, and every other
user behind the same proxy still gets in. It is the same whether or not the username exists.
Each further lockout of the same pair within a day doubles the wait, from
PATHFINDER_LOGIN_LOCKOUT_MINUTES up to a day, rather than one long wall that every failure
renews. The operator sees and lifts lockouts in the admin (Axes: access attempts).
"""

from __future__ import annotations

import datetime
import ipaddress

from axes.helpers import get_client_username
from axes.models import AccessFailureLog
from django.conf import settings
from django.utils import timezone

MAX_COOL_OFF = datetime.timedelta(days=1)


def client_address(request) -> str:
    """The client's address: REMOTE_ADDR, or, when that is a configured proxy
    (PATHFINDER_TRUSTED_PROXIES), the right-most X-Forwarded-For hop that is not one. Hops left
    of that are the client's own claims and are ignored."""
    remote = request.META.get("REMOTE_ADDR", "")
    forwarded = request.META.get("HTTP_X_FORWARDED_FOR", "").split(",")
    hops = [hop.strip() for hop in forwarded if hop.strip()]
    address = remote
    while hops and _trusted(address):
        address = hops.pop()  # whom that proxy says it received the request from
    return address if _valid(address) else remote


def _valid(address: str) -> bool:
    try:
        ipaddress.ip_address(address)
    except ValueError:
        return False
    return True


def _trusted(address: str) -> bool:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    return any(
        ip in ipaddress.ip_network(n, strict=False) for n in settings.PATHFINDER_TRUSTED_PROXIES
    )


def cool_off(request) -> datetime.timedelta:
    """PATHFINDER_LOGIN_LOCKOUT_MINUTES, doubled for each earlier lockout of this username and
    address in the last day, at most a day."""
    first = datetime.timedelta(minutes=settings.PATHFINDER_LOGIN_LOCKOUT_MINUTES)
    if request is None:
        return first
    username = get_client_username(request, getattr(request, "axes_credentials", None))
    lockouts = AccessFailureLog.objects.filter(
        username=username,
        ip_address=getattr(request, "axes_ip_address", None) or client_address(request),
        locked_out=True,
        attempt_time__gte=timezone.now() - MAX_COOL_OFF,
    ).count()
    return min(first * 2 ** min(max(lockouts - 1, 0), 20), MAX_COOL_OFF)

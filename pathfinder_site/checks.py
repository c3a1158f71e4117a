"""Deployment checks of our own, beside Django's (`manage.py check --deploy`)."""

from django.conf import settings
from django.core.checks import Error, Tags, register
from django.core.exceptions import ImproperlyConfigured

DEVELOPMENT_SECRET = Error(
    "The development SECRET_KEY is in use with debug off.",
    hint="Set PATHFINDER_SECRET_KEY (or PATHFINDER_SECRET_KEY_FILE) to a long random value; "
    "`manage.py bootstrap_local` makes one under var/ for the embedded default.",
    id="pathfinder.E001",
)


def uses_development_secret() -> bool:
    return not settings.DEBUG and settings.SECRET_KEY == settings.DEVELOPMENT_SECRET_KEY


@register(Tags.security, deploy=True)
def development_secret_check(app_configs, **kwargs):
    return [DEVELOPMENT_SECRET] if uses_development_secret() else []


def refuse_development_secret() -> None:
    """Called as a web process starts: it does not serve sessions signed with a public key."""
    if uses_development_secret():
        raise ImproperlyConfigured(f"{DEVELOPMENT_SECRET.msg} {DEVELOPMENT_SECRET.hint}")

"""First-run setup for the embedded default: its secret key, the log's signing key, the default
model file, a local admin user who reviews the local matter, and this machine's API key for it
(made once, kept under var/), printed."""

import os
import secrets
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand
from django.utils import timezone

from audit.keys import signing_key_create
from decoding.kinds.files import default_model_file
from decoding.models import ApiKey
from decoding.services import api_key_create
from pathfinder_site.secret_key import local_secret_key_create
from reviewers.services import reviewer_upsert


class Command(BaseCommand):
    help = (
        "Create a local admin user who reviews the 'local' matter, and this machine's API key "
        "for it, kept under PATHFINDER_VAR_DIR (for make run)."
    )

    def handle(self, *args, **options):
        secret_file = settings.PATHFINDER_LOCAL_SECRET_KEY_FILE
        if local_secret_key_create(secret_file):
            self.stdout.write(f"Created the secret key {secret_file} (mode 0600).")
        key, made = signing_key_create()
        if made:
            self.stdout.write(
                f"Created the checkpoint signing key {settings.PATHFINDER_CHECKPOINT_KEY_FILE} "
                "(mode 0600; back it up offline). Its verifier key, for examiners:"
            )
        else:
            self.stdout.write("Checkpoint verifier key:")
        self.stdout.write(f"  {key.verifier}")
        # Made here rather than by the first request, which would wait for it.
        self.stdout.write(f"Default model file: {default_model_file()}")
        user_model = get_user_model()
        username = os.environ.get("PATHFINDER_ADMIN_USER", "admin")
        if not user_model.objects.filter(username=username).exists():
            password = os.environ.get("PATHFINDER_ADMIN_PASSWORD") or secrets.token_urlsafe(12)
            user_model.objects.create_superuser(username=username, password=password, email="")
            self.stdout.write(f"Admin user: {username}  password: {password}")
        else:
            self.stdout.write(
                f"Admin user {username!r} already exists (its password was printed when it was "
                f"made; a new one: manage.py changepassword {username})."
            )
        # The admin is the local matter's reviewer too, so the portal shows its trails.
        reviewer_upsert(username=username, password=None, matter_names=[LOCAL_MATTER])
        self.stdout.write(
            f"Reviewer's desk: /portal/ (log in as {username}; matter {LOCAL_MATTER!r}); "
            "operators: /admin/"
        )
        raw_key, made = _local_api_key(settings.VAR_DIR / LOCAL_KEY_FILE)
        self.stdout.write(
            f"API key for matter {LOCAL_MATTER!r} ({'new' if made else 'kept'} in "
            f"{settings.VAR_DIR / LOCAL_KEY_FILE}):"
        )
        self.stdout.write(raw_key)


LOCAL_MATTER = "local"
LOCAL_KEY_FILE = "local-api-key"


def _local_api_key(path: Path) -> tuple[str, bool]:
    """This machine's key for the local matter: the one kept in `path` while it still works
    (not revoked, not expired), else a new one written there (mode 0600). True when new."""
    if path.exists():
        raw_key = path.read_text().strip()
        kept = ApiKey.objects.filter(key_hash=ApiKey.digest(raw_key), revoked_at__isnull=True)
        key = kept.first()
        if key is not None and not key.is_expired(timezone.now()):
            return raw_key, False
        path.unlink()
    _, raw_key = api_key_create(matter_name=LOCAL_MATTER, name=f"local-{secrets.token_hex(3)}")
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        handle.write(raw_key + "\n")
    return raw_key, True

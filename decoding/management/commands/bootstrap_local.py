"""First-run setup for the embedded default: its secret key, the log's signing key, the default
model file, a local admin user and an API key, printed."""

import os
import secrets

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand

from audit.keys import signing_key_create
from decoding.kinds.files import default_model_file
from decoding.services import api_key_create
from pathfinder_site.secret_key import local_secret_key_create


class Command(BaseCommand):
    help = "Create a local admin user and a fresh API key for the 'local' matter (for make run)."

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
            self.stdout.write(f"Admin user: {username}  password: {password}  (/admin/)")
        else:
            self.stdout.write(f"Admin user {username!r} already exists.")
        name = f"local-{secrets.token_hex(3)}"
        _, raw_key = api_key_create(matter_name="local", name=name)
        self.stdout.write(f"API key for matter 'local' ({name}):")
        self.stdout.write(raw_key)

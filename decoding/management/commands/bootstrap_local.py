"""First-run setup for the embedded default: a local admin user and an API key, printed."""

import os
import secrets

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand

from decoding.services import api_key_create


class Command(BaseCommand):
    help = "Create a local admin user and a fresh API key for the 'local' matter (for make run)."

    def handle(self, *args, **options):
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

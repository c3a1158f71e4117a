"""The people and applications the tests play, made the same way in every suite that talks to
the database (the fixtures in tests/conftest.py hand them out)."""

from types import SimpleNamespace

from django.contrib.auth import get_user_model
from django.test import Client
from rest_framework.test import APIClient

from decoding.models import Matter
from decoding.services import api_key_create
from reviewers.models import MatterGrant


def application(matter_name: str, key_name: str) -> SimpleNamespace:
    """An application holding a key of the matter: `key`, `raw` and an authorised `api`."""
    key, raw = api_key_create(matter_name=matter_name, name=key_name)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return SimpleNamespace(key=key, raw=raw, api=client)


def grant(username: str, matter_name: str):
    """A user granted the matter (made if missing)."""
    user = get_user_model().objects.create_user(username)
    matter, _ = Matter.objects.get_or_create(name=matter_name)
    MatterGrant.objects.create(user=user, matter=matter)
    return user


def logged_in(user) -> Client:
    client = Client()
    client.force_login(user)
    client.user = user
    return client

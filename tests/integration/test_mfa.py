"""With PATHFINDER_REQUIRE_MFA on, the portal and the admin want a one-time password (TOTP)
after the password: enrolled on first use, verified every session; the APIs are unaffected."""

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django_otp.oath import totp
from django_otp.plugins.otp_totp.models import TOTPDevice

from reviewers.models import MatterGrant


@pytest.fixture
def required(settings):
    settings.PATHFINDER_REQUIRE_MFA = True


def signed_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def code_for(device: TOTPDevice) -> str:
    return f"{totp(device.bin_key, step=device.step, t0=device.t0, digits=device.digits):06d}"


def test_a_reviewer_enrols_then_is_let_in_once_verified(required, owner):
    user = get_user_model().objects.create_user("rita")
    MatterGrant.objects.create(user=user, matter=owner.key.matter)
    client = signed_in(user)
    held = client.get("/portal/")
    assert held.status_code == 302 and held["Location"].startswith("/accounts/mfa/?next=")
    page = client.get(held["Location"])
    assert page.status_code == 200 and b'id="secret"' in page.content  # enrolment, once
    device = TOTPDevice.objects.get(user=user)
    assert not device.confirmed
    wrong = client.post("/accounts/mfa/", {"code": "000000", "next": "/portal/"})
    assert wrong.status_code == 200 and client.get("/portal/").status_code == 302
    device.refresh_from_db()
    device.throttling_failure_count = 0  # django-otp slows the next try after a wrong one
    device.throttling_failure_timestamp = None
    device.save()
    right = client.post("/accounts/mfa/", {"code": code_for(device), "next": "/portal/"})
    assert (right.status_code, right["Location"]) == (302, "/portal/")
    assert client.get("/portal/").status_code == 200
    device.refresh_from_db()
    assert device.confirmed
    # A new session asks again, and no longer shows the key.
    again = signed_in(user)
    assert again.get("/portal/").status_code == 302
    assert b'id="secret"' not in again.get("/accounts/mfa/").content


def test_staff_need_it_for_the_admin_and_api_keys_do_not(required, owner):
    staff = get_user_model().objects.create_superuser("olga", email="", password=None)
    assert signed_in(staff).get("/admin/").status_code == 302
    assert owner.api.get("/api/v1/generations").status_code == 200


def test_without_the_setting_nothing_changes(owner):
    user = get_user_model().objects.create_user("rita")
    MatterGrant.objects.create(user=user, matter=owner.key.matter)
    assert signed_in(user).get("/portal/").status_code == 200
    assert not TOTPDevice.objects.exists()


def test_a_redirect_after_the_code_stays_on_this_site(required, owner):
    user = get_user_model().objects.create_user("rita")
    client = signed_in(user)
    client.get("/accounts/mfa/")
    device = TOTPDevice.objects.get(user=user)
    answer = client.post(
        "/accounts/mfa/", {"code": code_for(device), "next": "https://evil.example/"}
    )
    assert answer["Location"] == "/portal/"

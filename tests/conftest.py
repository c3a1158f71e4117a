"""The test cast, one home for every suite on the database: `owner` (an application of "Doe v.
Roe"), `outsider` (one of "Other v. Matter"), `reviewer` (granted "Doe v. Roe"),
`other_reviewer` (granted "Other v. Matter") and `operator` (staff, no grant)."""

import pytest
from django.contrib.auth import get_user_model

from tests.cast import application, grant, logged_in


@pytest.fixture
def owner(db):
    return application("Doe v. Roe", "discovery-app")


@pytest.fixture
def outsider(db):
    return application("Other v. Matter", "other-app")


@pytest.fixture
def reviewer(owner):
    return logged_in(grant("rita", "Doe v. Roe"))


@pytest.fixture
def other_reviewer(outsider):
    return logged_in(grant("otto", "Other v. Matter"))


@pytest.fixture
def operator(db):
    user = get_user_model().objects.create_superuser("olga", email="", password=None)
    return logged_in(user)

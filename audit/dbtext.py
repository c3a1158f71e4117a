"""UUID columns read in bulk as their canonical text (what records and leaves name them by).

PostgreSQL casts them in the query, sparing a UUID object per row; SQLite stores them as 32 hex
digits, so there they are read as UUIDs and written out here."""

from __future__ import annotations

import uuid

from django.db import connection
from django.db.models import F, TextField
from django.db.models.functions import Cast


def uuid_text(name: str):
    """An expression for values()/values_list(): the column as text where the database can."""
    return Cast(name, TextField()) if connection.vendor == "postgresql" else F(name)


def canonical(value: str | uuid.UUID | None) -> str | None:
    """What uuid_text read, as canonical UUID text."""
    return value if value is None or isinstance(value, str) else str(value)

"""What text the store can hold: PostgreSQL's text and jsonb take no NUL character, and UTF-8
has no unpaired surrogate. A request's or a batch line's text is checked against it before
anything is stored, so such input is a 4xx naming its place, never a database error."""

from __future__ import annotations


def storable(text: str) -> bool:
    """Whether the store can hold `text`: no NUL, and valid UTF-8 (no unpaired surrogate)."""
    if "\x00" in text:
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True

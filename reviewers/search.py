"""The trails list's search box: an exact job id, a request id prefix, or words of what was
asked (the rendered prompt) or answered (the output text).

On PostgreSQL the words are a web-search query (`"exact phrase"`, `-word`, `or`) over an English
full-text vector of both texts, stored and indexed (migration decoding 0014), so a search costs
an index lookup, not a scan of every prompt. On SQLite (the embedded default) every word must
appear in one of the two texts, case-insensitively: a scan, which is what a single-machine store
can afford.
"""

from __future__ import annotations

import contextlib
import uuid

from django.db import connections
from django.db.models import BooleanField, Q, QuerySet
from django.db.models.expressions import RawSQL

# The stored vector of migration decoding 0014 (PostgreSQL only, so outside the Django model).
MATCH = '"decoding_generationjob"."text_search" @@ websearch_to_tsquery(\'english\'::regconfig, %s)'


def job_search(jobs: QuerySet, text: str) -> QuerySet:
    """The jobs among `jobs` that `text` names or whose prompt or answer holds its words."""
    named = Q(request_id__startswith=text)
    with contextlib.suppress(ValueError):
        named |= Q(id=uuid.UUID(text))
    if connections[jobs.db].vendor == "postgresql":
        jobs = jobs.annotate(_text_match=RawSQL(MATCH, [text], output_field=BooleanField()))
        return jobs.filter(named | Q(_text_match=True))
    return jobs.filter(named | _every_word(text))


def _every_word(text: str) -> Q:
    words = [word.strip('"') for word in text.split()]
    query = Q()
    for word in filter(None, words):
        query &= Q(prompt_text__icontains=word) | Q(output_text__icontains=word)
    return query

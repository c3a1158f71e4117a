"""Every route the site serves, walked from Django's own URL resolver (issue 41, item 6): each path
parameter filled with hostile values, each page asked with hostile queries, each POST sent hostile
bodies, by a caller of each kind (no one, an API key, a reviewer, an operator). None may answer
5xx: a hostile input is the caller's fault, so a 4xx (or a page that ignores it). A route added
later is walked too, without this file knowing it."""

from __future__ import annotations

import uuid

import pytest
from django.urls import URLPattern, URLResolver, get_resolver

from .test_batches import create, line, upload

# What a path parameter may be given: a NUL, a lone surrogate and bytes that are not UTF-8
# (percent-encoded), a number past any column, a traversal, an empty-looking name.
HOSTILE_SEGMENTS = ["a%00b", "%ED%A0%80", "%FF%FE", "9" * 40, "..%2F.."]
HOSTILE_QUERY = "?page={0}&since={0}&until={0}&q={0}&limit={0}&after={0}&cursor={0}&step={0}"
HOSTILE_QUERY_VALUES = ["9" * 40, "%00", "%ED%A0%80"]
HOSTILE_BODIES = [
    ("application/json", b"{"),
    ("application/json", b'{"prompt": "\\u0000", "input_file_id": "\\ud800"}'),
    ("application/json", b"[" * 2000 + b"]" * 2000),
    ("application/json", b'{"max_tokens": 1e309, "limit": 99999999999999999999999}'),
    ("application/x-www-form-urlencoded", b"a=%00&page=%ED%A0%80&csrfmiddlewaretoken=x"),
    ("multipart/form-data; boundary=x", b"--x\r\nContent-Disposition: form-data; name=\x00\r\n"),
]
# Routes whose answer is a stream that waits for news (a follower of the log): asked with a
# query only, never left waiting.
SKIP = {"log/follow", "readyz"}  # readyz: 503 is its answer when no worker is up


def routes(patterns=None, prefix: str = "") -> list[tuple[str, list[str]]]:
    """(the route, its parameter names) for every URL pattern, nested includes flattened."""
    found = []
    for entry in get_resolver().url_patterns if patterns is None else patterns:
        text = prefix + str(entry.pattern)
        if isinstance(entry, URLResolver):
            found += routes(entry.url_patterns, text)
        elif isinstance(entry, URLPattern):
            found.append((text, list(entry.pattern.converters)))
    return found


def filled(route: str, value: str) -> str | None:
    """The route with every parameter `value` (None for a regular expression route)."""
    if route.startswith("^") or "(?P" in route:
        return None
    path = route
    while "<" in path:
        start, end = path.index("<"), path.index(">")
        kind = path[start + 1 : end].split(":")[0] if ":" in path[start:end] else "str"
        given = str(uuid.uuid4()) if kind == "uuid" else ("7" if kind == "int" else value)
        path = path[:start] + given + path[end + 1 :]
    return "/" + path


@pytest.fixture
def callers(owner, reviewer, operator, client):
    found = {"anonymous": client, "key": owner.api, "reviewer": reviewer, "operator": operator}
    for caller in found.values():
        caller.raise_request_exception = False  # a 500 is counted, not raised
    return found


def test_no_route_answers_a_hostile_path_query_or_body_with_a_5xx(callers, owner):
    create(owner, upload(owner, line("one") + "\n").json()["id"])  # something to list
    walked, failing = set(), {}
    for route, _ in routes():
        if any(skip in route for skip in SKIP):
            continue
        for segment in HOSTILE_SEGMENTS:
            path = filled(route, segment)
            if path is None or path in walked:
                continue
            walked.add(path)
            for who, caller in callers.items():
                asked = [("GET", path + HOSTILE_QUERY.format(v)) for v in HOSTILE_QUERY_VALUES]
                answers = [(url, caller.get(url)) for _, url in asked]
                for kind, body in HOSTILE_BODIES:
                    answers.append(
                        (f"POST {path} {body[:30]!r}", caller.post(path, body, content_type=kind))
                    )
                for url, answer in answers:
                    if answer.status_code >= 500:
                        failing[f"{who} {url}"] = (answer.status_code, answer.content[:160])
    assert len(walked) > 60  # the walk reached the site, not a handful of routes
    assert failing == {}, "\n".join(f"{k}: {v}" for k, v in failing.items())

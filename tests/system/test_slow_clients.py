"""Slow clients against the production shape: gunicorn (gunicorn.conf.py) behind the buffering
front (pathfinder_site.front). Straight at gunicorn, 40 half-open connections take every thread of
a web process, so /healthz goes unanswered; through the front, /healthz answers in under a second
while they hang, and requests of every shape still pass: a chunked body, `Expect: 100-continue`,
a stream, a caller that leaves."""

from __future__ import annotations

import contextlib
import socket
import time

import pytest
import requests

from .helpers import Stack, auth, start_web_and_front, stop_all, wait_until_healthy

pytestmark = [pytest.mark.system, pytest.mark.timeout(240)]

STALLED = 40
MODEL = "smollm2-135m-instruct"


@pytest.fixture
def fronted(postgres_stack: Stack, tmp_path):
    """One gunicorn web process and a front before it: (the front's URL, gunicorn's URL)."""
    web, web_port, front, front_port = start_web_and_front("slow", postgres_stack.env, tmp_path)
    try:
        wait_until_healthy(f"http://127.0.0.1:{front_port}", [web, front])
        yield f"http://127.0.0.1:{front_port}", f"http://127.0.0.1:{web_port}", front_port, web_port
    finally:
        stop_all([front, web])


def half_open(port: int, count: int) -> list[socket.socket]:
    """Connections that send the start of a request's head and then nothing more."""
    stalled = []
    for _ in range(count):
        connection = socket.create_connection(("127.0.0.1", port), timeout=5)
        connection.sendall(b"GET /healthz HTTP/1.1\r\nHost: example\r\nX-Slow: ")
        stalled.append(connection)
    return stalled


def close(connections: list[socket.socket]) -> None:
    for connection in connections:
        with contextlib.suppress(OSError):
            connection.close()


def test_half_open_connections_take_gunicorn_but_not_the_front(fronted):
    front_url, web_url, front_port, web_port = fronted
    # Straight at gunicorn: every thread waits for a head that never ends.
    stalled = half_open(web_port, STALLED)
    try:
        time.sleep(1)
        with pytest.raises(requests.exceptions.ReadTimeout):
            requests.get(f"{web_url}/healthz", timeout=(2, 3))
    finally:
        close(stalled)
    time.sleep(1)  # gunicorn's threads see the closed connections and are free again
    # Through the front: the same, and as many that send nothing at all.
    stalled = half_open(front_port, STALLED)
    silent = [socket.create_connection(("127.0.0.1", front_port)) for _ in range(STALLED)]
    try:
        time.sleep(1)
        slowest = 0.0
        for _ in range(10):
            started = time.monotonic()
            response = requests.get(f"{front_url}/healthz", timeout=5)
            slowest = max(slowest, time.monotonic() - started)
            assert response.status_code == 200
        assert slowest < 1, slowest
    finally:
        close(stalled + silent)


def test_a_stalled_head_is_closed_with_408(fronted):
    _, _, front_port, _ = fronted
    (stalled,) = half_open(front_port, 1)
    stalled.settimeout(30)
    answer = stalled.recv(4096)
    stalled.close()
    assert answer.startswith(b"HTTP/1.1 408 "), answer


def test_requests_of_every_shape_pass_through_the_front(fronted, postgres_stack):
    front_url, _, front_port, _ = fronted
    key = auth(postgres_stack.api_key)
    body = b'{"model": "stub", "prompt_token_ids": [1, 2, 3], "max_tokens": 4}'

    def chunks():
        yield body[:10]
        yield body[10:]

    chunked = requests.post(
        f"{front_url}/api/v1/generations",
        data=chunks(),  # no length: sent chunked, forwarded with its length
        headers={**key, "Content-Type": "application/json"},
        timeout=30,
    )
    assert chunked.status_code == 202, chunked.text
    # curl's way with a body: Expect: 100-continue, the body only after the interim answer.
    with socket.create_connection(("127.0.0.1", front_port), timeout=30) as raw:
        raw.sendall(
            b"POST /api/v1/generations HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Content-Type: application/json\r\n"
            b"Authorization: " + key["Authorization"].encode() + b"\r\n"
            b"Expect: 100-continue\r\nContent-Length: %d\r\n\r\n" % len(body)
        )
        assert raw.recv(4096).startswith(b"HTTP/1.1 100 Continue")
        raw.sendall(body)
        answer = b""
        while chunk := raw.recv(65536):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 202 "), answer[:200]
    assert b"X-Forwarded-For" not in answer
    # A stream arrives as a stream: its chunks as the job decodes, not all at the end.
    seen = []
    with requests.post(
        f"{front_url}/v1/completions",
        json={
            "model": MODEL,
            "prompt": "Count to fifty.",
            "max_tokens": 48,
            "ignore_eos": True,
            "stream": True,
        },  # fmt: skip
        headers=key,
        stream=True,
        timeout=60,
    ) as stream:
        assert stream.status_code == 200
        for line in stream.iter_lines():
            if line.startswith(b"data: "):
                seen.append(time.monotonic())
    assert len(seen) >= 3 and seen[-1] - seen[0] > 0.05, seen  # a buffered body: all at once


def test_a_body_over_the_fronts_limit_is_refused_there(fronted):
    _, _, front_port, _ = fronted
    with socket.create_connection(("127.0.0.1", front_port), timeout=30) as raw:
        raw.sendall(
            b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 999999999\r\n\r\n"
        )
        assert raw.recv(4096).startswith(b"HTTP/1.1 413 ")

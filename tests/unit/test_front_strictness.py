"""The buffering front's syntax, as strict as nginx's (issue 41, item 1): what the outside check
got through it, each now refused with a 400 (never an unhandled exception), and the scheme a
client claims never reaches gunicorn, which trusts the X-Forwarded-Proto of the front's address.
Run on the front's own parser, fed bytes as a socket would feed them."""

import asyncio
import concurrent.futures

import pytest

from pathfinder_site import front
from pathfinder_site.front_buffers import RequestBody


def chunked(raw: bytes, most: int = 1 << 20) -> bytes:
    async def read():
        reader = asyncio.StreamReader()
        reader.feed_data(raw)
        reader.feed_eof()
        body = RequestBody()
        await front._chunked(reader, body, most)
        return b"".join(body.pieces())

    # A loop of its own, in a thread: a browser test earlier in the run may hold this thread's.
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, read()).result()


@pytest.mark.parametrize("size", [b"-1", b"0x2", b"+2", b" 2", b"2 2", b"", b"g", b"1" * 17])
def test_a_chunk_size_nginx_refuses_is_a_400(size):
    with pytest.raises(front.BadRequest) as refused:
        chunked(size + b"\r\nab\r\n0\r\n\r\n")
    assert refused.value.status == 400


@pytest.mark.parametrize("size", [b"2", b"02", b"2;ext=1", b"2 ;ext", b"A"])
def test_a_well_formed_chunk_size_is_read(size):
    count = int(size.split(b";")[0].strip(), 16)
    body = chunked(size + b"\r\n" + b"x" * count + b"\r\n0\r\n\r\n")
    assert body == b"x" * count


def test_http_1_1_without_host_is_a_400():
    with pytest.raises(front.BadRequest) as refused:
        front._parse_head(b"GET /healthz HTTP/1.1\r\nAccept: */*\r\n\r\n")
    assert refused.value.status == 400
    line, headers = front._parse_head(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    assert line == b"GET /healthz HTTP/1.1" and headers == [(b"Host", b"x")]


def test_a_clients_scheme_claims_never_reach_gunicorn():
    headers = [
        (b"Host", b"x"),
        (b"X-Forwarded-Proto", b"https"),
        (b"x-forwarded-protocol", b"ssl"),
        (b"X-Forwarded-Ssl", b"on"),
        (b"Forwarded", b"proto=https"),
    ]
    request = front._upstream_head(b"GET / HTTP/1.1", headers, 0, "10.0.0.7")
    head = request.split(b"\r\n\r\n")[0].lower()
    assert (
        head.count(b"x-forwarded-proto:") == 1 and b"x-forwarded-proto: http\r\n" in head + b"\r\n"
    )
    assert b"https" not in head and b"ssl" not in head and b"forwarded: proto" not in head


def test_the_tls_proxy_the_operator_trusts_keeps_its_scheme(monkeypatch):
    monkeypatch.setenv("PATHFINDER_TRUSTED_PROXIES", "127.0.0.1, 10.1.0.0/16")
    headers = [(b"Host", b"x"), (b"X-Forwarded-Proto", b"https")]
    from_proxy = front._upstream_head(b"GET / HTTP/1.1", headers, 0, "10.1.2.3")
    assert b"X-Forwarded-Proto: https" in from_proxy
    assert b"X-Forwarded-Proto: http\r" not in from_proxy
    from_client = front._upstream_head(b"GET / HTTP/1.1", headers, 0, "192.0.2.9")
    assert b"https" not in from_client and b"X-Forwarded-Proto: http\r\n" in from_client

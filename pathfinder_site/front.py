"""The buffering front: an HTTP/1.1 proxy before gunicorn that reads each request whole before
a gunicorn thread sees it, so a slow or half-open client costs a coroutine here, not one of the
web process's 16 threads. Responses pass through as they come: a stream stays a stream.

    python -m pathfinder_site.front --bind 0.0.0.0:8000 --upstream 127.0.0.1:8001

A request's head must arrive within HEAD_TIMEOUT_S and its body within BODY_TIMEOUT_S, or the
connection is closed (408 where a head began). Each request goes to gunicorn on a connection of
its own, with the client's address appended to X-Forwarded-For (set PATHFINDER_TRUSTED_PROXIES
to the front's address on the web processes) and `Connection: close`; when the client goes away
mid-response, that connection is closed, so a waiting request sees its caller leave
(decoding.web.waiting). A chunked body is forwarded with its length; `Expect: 100-continue` is
answered here. One request per client connection: the response closes it. Its syntax is as
strict as nginx's: a chunk size is hex digits only, an HTTP/1.1 request names one Host, and a
client's claim of the scheme (X-Forwarded-Proto and its kin) is replaced by `http` unless the
client is a proxy in PATHFINDER_TRUSTED_PROXIES (the TLS proxy before the front).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ipaddress
import logging
import os
import re
import signal

logger = logging.getLogger("pathfinder.front")

HEAD_TIMEOUT_S = 10
BODY_TIMEOUT_S = 60
MAX_HEAD_BYTES = 64 << 10
# Above the API's own 1 MiB (which answers 413 in its own words); the front's is a backstop.
MAX_BODY_BYTES = 8 << 20
# A Batch API upload (POST /v1/files) may be as large as a batch input file may be, plus its
# multipart framing; it takes longer to arrive.
UPLOAD_PATH = b"/v1/files"
UPLOAD_MAX_BODY_BYTES = int(os.environ.get("PATHFINDER_BATCH_MAX_FILE_BYTES", 200 << 20)) + (
    1 << 20
)
UPLOAD_TIMEOUT_S = 900
# How long a stopping front lets open responses finish (gunicorn's graceful_timeout is 30 s).
STOP_GRACE_S = 35
# Headers that describe one hop, not the request: the front sets its own.
HOP_BY_HOP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-connection",
        b"te",
        b"trailer",
        b"transfer-encoding",
        b"upgrade",
        b"expect",
        b"content-length",
    }
)


# What a client may claim of the connection's scheme. Gunicorn believes these from the front's
# address (its forwarded_allow_ips), so the front passes them on only from a proxy the operator
# trusts (PATHFINDER_TRUSTED_PROXIES: the TLS proxy before it); from anyone else it drops them
# and says plain HTTP, which is what the front speaks.
SCHEME_CLAIMS = frozenset(
    {b"x-forwarded-proto", b"x-forwarded-protocol", b"x-forwarded-ssl", b"forwarded"}
)
# A chunk size as RFC 9112 writes it, and nginx reads it: hex digits only (no sign, no 0x).
_CHUNK_SIZE = re.compile(rb"[0-9A-Fa-f]{1,16}")


class BadRequest(Exception):
    def __init__(self, status: int, reason: str):
        super().__init__(reason)
        self.status = status
        self.reason = reason


class Front:
    def __init__(self, upstream: tuple[str, int]):
        self.upstream = upstream
        self.connections = 0

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            await self._one(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # the client left
        finally:
            self.connections -= 1
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _one(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), HEAD_TIMEOUT_S)
        except TimeoutError:
            await _refuse(writer, 408)
            return
        except asyncio.LimitOverrunError:
            await _refuse(writer, 431)
            return
        try:
            line, headers = _parse_head(head)
            most, timeout = _body_limits(line)
            body = await asyncio.wait_for(_body(reader, writer, headers, most), timeout)
        except BadRequest as bad:
            await _refuse(writer, bad.status, bad.reason)
            return
        except TimeoutError:
            await _refuse(writer, 408)
            return
        peer = writer.get_extra_info("peername")
        request = _upstream_request(line, headers, body, peer[0] if peer else "")
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        except OSError:
            await _refuse(writer, 502, "the web process is not answering")
            return
        try:
            up_writer.write(request)
            await up_writer.drain()
            await _relay(up_reader, reader, writer)
        finally:
            up_writer.close()  # the client left or the response ended: gunicorn sees it closed
            with contextlib.suppress(Exception):
                await up_writer.wait_closed()


def _parse_head(head: bytes) -> tuple[bytes, list[tuple[bytes, bytes]]]:
    lines = head[:-4].split(b"\r\n")
    line = lines[0]
    if len(line.split(b" ")) != 3 or not line.split(b" ")[2].startswith(b"HTTP/1."):
        raise BadRequest(400, "malformed request line")
    headers = []
    for raw in lines[1:]:
        name, colon, value = raw.partition(b":")
        if not colon or not name or name != name.strip():
            raise BadRequest(400, "malformed header")
        headers.append((name, value.strip()))
    hosts = [value for name, value in headers if name.lower() == b"host"]
    if len(hosts) > 1 or (not hosts and line.endswith(b"HTTP/1.1")):
        raise BadRequest(400, "an HTTP/1.1 request names exactly one Host")
    return line, headers


def _header(headers: list[tuple[bytes, bytes]], name: bytes) -> bytes | None:
    values = [value for key, value in headers if key.lower() == name]
    if len(values) > 1 and name == b"content-length" and len(set(values)) > 1:
        raise BadRequest(400, "conflicting Content-Length")
    return values[0] if values else None


def _body_limits(line: bytes) -> tuple[int, float]:
    """The most bytes the request's body may have, and how long it may take to arrive."""
    method, target, _ = line.split(b" ")
    if method == b"POST" and target.split(b"?")[0].rstrip(b"/") == UPLOAD_PATH:
        return UPLOAD_MAX_BODY_BYTES, UPLOAD_TIMEOUT_S
    return MAX_BODY_BYTES, BODY_TIMEOUT_S


async def _body(reader, writer, headers, most: int) -> bytes:
    chunked = (_header(headers, b"transfer-encoding") or b"").lower()
    length = _header(headers, b"content-length")
    if chunked and length is not None:
        raise BadRequest(400, "both Content-Length and Transfer-Encoding")
    if chunked and chunked != b"chunked":
        raise BadRequest(501, "unsupported Transfer-Encoding")
    if length is not None and (not length.isdigit() or int(length) > most):
        raise BadRequest(413 if length.isdigit() else 400, "body too large or malformed length")
    if (_header(headers, b"expect") or b"").lower() == b"100-continue" and (chunked or length):
        writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        await writer.drain()
    if chunked:
        return await _chunked(reader, most)
    return await reader.readexactly(int(length)) if length else b""


async def _chunked(reader: asyncio.StreamReader, most: int) -> bytes:
    body = bytearray()
    while True:
        size_line = await reader.readuntil(b"\r\n")
        size = size_line[:-2].split(b";")[0].rstrip(b" \t")
        if not _CHUNK_SIZE.fullmatch(size):
            raise BadRequest(400, "malformed chunk size")
        count = int(size, 16)
        if len(body) + count > most:
            raise BadRequest(413, "body too large")
        if count == 0:
            while await reader.readuntil(b"\r\n") != b"\r\n":
                pass  # trailers, dropped
            return bytes(body)
        body += await reader.readexactly(count)
        if await reader.readexactly(2) != b"\r\n":
            raise BadRequest(400, "malformed chunk")


def trusted_proxy(peer: str) -> bool:
    """Whether `peer` is one of PATHFINDER_TRUSTED_PROXIES (addresses or networks, commas)."""
    listed = os.environ.get("PATHFINDER_TRUSTED_PROXIES", "")
    try:
        address = ipaddress.ip_address(peer)
    except ValueError:
        return False
    for entry in filter(None, (part.strip() for part in listed.split(","))):
        with contextlib.suppress(ValueError):
            if address in ipaddress.ip_network(entry, strict=False):
                return True
    return False


def _upstream_request(line: bytes, headers, body: bytes, peer: str) -> bytes:
    forwarded = [value for key, value in headers if key.lower() == b"x-forwarded-for"]
    trusted = trusted_proxy(peer)
    dropped = HOP_BY_HOP | {b"x-forwarded-for"} | (frozenset() if trusted else SCHEME_CLAIMS)
    kept = [(key, value) for key, value in headers if key.lower() not in dropped]
    if not trusted:  # the front speaks plain HTTP, and says so
        kept.append((b"X-Forwarded-Proto", b"http"))
    chain = b", ".join([*forwarded, peer.encode()])
    kept += [
        (b"X-Forwarded-For", chain),
        (b"Content-Length", str(len(body)).encode()),
        (b"Connection", b"close"),
    ]
    head = b"\r\n".join([line, *(key + b": " + value for key, value in kept)])
    return head + b"\r\n\r\n" + body


async def _relay(up_reader, client_reader, client_writer) -> None:
    """gunicorn's response to the client as it comes, until gunicorn closes or the client
    does."""

    async def pump() -> None:
        while chunk := await up_reader.read(64 << 10):
            client_writer.write(chunk)
            await client_writer.drain()

    async def client_left() -> None:
        while await client_reader.read(4096):
            pass  # anything more from the client is ignored: one request per connection

    pumping = asyncio.ensure_future(pump())
    watching = asyncio.ensure_future(client_left())
    try:
        await asyncio.wait({pumping, watching}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (pumping, watching):
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError, ConnectionError):
            await pumping


async def _refuse(writer: asyncio.StreamWriter, status: int, reason: str = "") -> None:
    phrases = {
        400: "Bad Request",
        408: "Request Timeout",
        413: "Content Too Large",
        431: "Request Header Fields Too Large",
        501: "Not Implemented",
        502: "Bad Gateway",
    }
    text = (reason or phrases[status]).encode()
    writer.write(
        b"HTTP/1.1 %d %s\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n"
        b"Connection: close\r\n\r\n%s" % (status, phrases[status].encode(), len(text), text)
    )
    with contextlib.suppress(ConnectionError):
        await writer.drain()


def _address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host or "127.0.0.1", int(port)


async def _main(bind: tuple[str, int], upstream: tuple[str, int]) -> None:
    front = Front(upstream)
    server = await asyncio.start_server(front.serve, *bind, limit=MAX_HEAD_BYTES, backlog=1024)
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stopping.set)
    logger.info("front listening on %s:%d, gunicorn at %s:%d", *bind, *upstream)
    await stopping.wait()
    server.close()
    # Open responses end as gunicorn ends them (a stopping web process answers its waits 503),
    # so they reach their callers; whatever is still open after the grace is cut.
    deadline = loop.time() + STOP_GRACE_S
    while front.connections and loop.time() < deadline:
        await asyncio.sleep(0.1)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m pathfinder_site.front", description=__doc__)
    parser.add_argument("--bind", default="127.0.0.1:8000", help="HOST:PORT to listen on")
    parser.add_argument("--upstream", required=True, help="gunicorn's HOST:PORT")
    options = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO)
    asyncio.run(_main(_address(options.bind), _address(options.upstream)))


if __name__ == "__main__":
    main()

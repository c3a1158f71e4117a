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

Bodies and responses are held in memory only up to 256 KiB a connection, the rest on disk
(pathfinder_site.front_buffers), so a 200 MB upload or a download to a client that reads slowly
costs disk, and gunicorn's thread is free as soon as it has answered. A body sent to the API
without a key is refused (401) from its headers, and an upload's key is checked with gunicorn
(AUTHORIZE_PATH) before its body is read; after a refusal the front reads and drops what the
client still sends for a while, so the client sees the answer. A client that takes nothing of a
response for SEND_TIMEOUT_S is cut. docs/adr/0027 measures it beside nginx.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ipaddress
import json
import logging
import os
import re
import signal

from pathfinder_site.front_buffers import PIECE_BYTES, RequestBody, ResponseSpool

logger = logging.getLogger("pathfinder.front")

HEAD_TIMEOUT_S = 10
BODY_TIMEOUT_S = 60
MAX_HEAD_BYTES = 64 << 10
# The web process's own limit (pathfinder_site.middleware), read from the same variable: a body
# over it is refused here, so the refusal reaches the client. gunicorn answering 413 before
# reading a body and closing would reset the connection under its own answer.
MAX_BODY_BYTES = int(os.environ.get("PATHFINDER_MAX_BODY_BYTES", 1 << 20))
# A Batch API upload (POST /v1/files) may be as large as a batch input file may be, plus its
# multipart framing; it takes longer to arrive.
UPLOAD_PATH = b"/v1/files"
UPLOAD_MAX_BODY_BYTES = int(os.environ.get("PATHFINDER_BATCH_MAX_FILE_BYTES", 200 << 20)) + (
    1 << 20
)
UPLOAD_TIMEOUT_S = 900
# Asked, with the upload's headers, whether its key may upload (decoding.web.openai_api).
AUTHORIZE_PATH = b"/edge/upload-authorization"
# The paths whose every call needs a key (the portal's forms use a session instead).
API_PREFIXES = (b"/v1/", b"/api/v1/")
KEYLESS = "authorization: this call needs an API key (Authorization: Bearer ...)."
# A client that takes nothing of a response for this long is cut (nginx's send_timeout).
SEND_TIMEOUT_S = 60
# After a refusal, what the client still sends is read and dropped for at most LINGER_S, or until
# it sends nothing for LINGER_IDLE_S (nginx's lingering_time and lingering_timeout).
LINGER_S = 30
LINGER_IDLE_S = 5
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
    def __init__(self, status: int, reason: str, body: bytes | None = None):
        super().__init__(reason)
        self.status = status
        self.reason = reason
        self.body = body  # JSON for the client, where the reason alone would not do


class TooLarge(Exception):
    """A body over the limit: 413, in the error shape of the path's API (_too_large)."""

    def __init__(self, length: int, most: int):
        super().__init__(f"{length} > {most}")
        self.length, self.most = length, most


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
        except TimeoutError:
            logger.info("cut a client that took nothing for %d s", SEND_TIMEOUT_S)
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
        peer = writer.get_extra_info("peername")
        address = peer[0] if peer else ""
        body = RequestBody()
        try:
            line, headers = _parse_head(head)
            most, timeout, upload = _body_limits(line)
            _check_framing(headers, most)  # as nginx: a length over the limit before the key
            _refuse_keyless(line, headers)
            if upload and (verdict := await self._authorize(line, headers, address)) is not None:
                writer.write(verdict)  # the key cannot upload: gunicorn's own answer, unread body
                await writer.drain()
                await _linger(reader)
                return
            await asyncio.wait_for(_body(reader, writer, headers, most, body), timeout)
        except (BadRequest, TooLarge) as refused:
            bad = refused
            if isinstance(refused, TooLarge):
                bad = _too_large(line, refused.length, refused.most)
            await _refuse(writer, bad.status, bad.reason, bad.body)
            await _linger(reader)
            return
        except TimeoutError:
            await _refuse(writer, 408)
            return
        try:
            await self._forward(
                _upstream_head(line, headers, body.length, address), body, reader, writer
            )
        finally:
            body.close()

    async def _forward(self, head: bytes, body: RequestBody, reader, writer) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        except OSError:
            await _refuse(writer, 502, "the web process is not answering")
            return
        # The body goes up while the answer comes back: gunicorn may answer (413, 401) before it
        # has read the body, and that answer must reach the client.
        sending = asyncio.ensure_future(_send(up_writer, head, body))
        try:
            await _relay(up_reader, reader, writer)
        finally:
            sending.cancel()
            up_writer.close()  # the client left or the response ended: gunicorn sees it closed
            with contextlib.suppress(Exception):
                await up_writer.wait_closed()

    async def _authorize(self, line: bytes, headers, address: str) -> bytes | None:
        """Ask gunicorn, from the upload's headers alone, whether its key may upload: None if it
        may, else gunicorn's whole answer (401, 403, 429) for the client. nginx's auth_request."""
        check = b"GET " + AUTHORIZE_PATH + b" HTTP/1.1"
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        except OSError:
            raise BadRequest(502, "the web process is not answering") from None
        try:
            up_writer.write(_upstream_head(check, headers, 0, address))
            await up_writer.drain()
            answer = await asyncio.wait_for(up_reader.read(MAX_HEAD_BYTES), HEAD_TIMEOUT_S)
            while more := await asyncio.wait_for(up_reader.read(MAX_HEAD_BYTES), HEAD_TIMEOUT_S):
                answer += more
                if len(answer) > MAX_HEAD_BYTES:
                    break
        except (TimeoutError, ConnectionError):
            raise BadRequest(502, "the web process did not answer the key check") from None
        finally:
            up_writer.close()
        status = answer.split(b" ", 2)[1:2]
        return None if status and status[0].startswith(b"2") else answer


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


def _path(line: bytes) -> bytes:
    return line.split(b" ")[1].split(b"?")[0]


def _body_limits(line: bytes) -> tuple[int, float, bool]:
    """The most bytes the request's body may have, how long it may take to arrive, and whether
    it is an upload (whose key is checked before its body is read)."""
    if line.split(b" ")[0] == b"POST" and _path(line).rstrip(b"/") == UPLOAD_PATH:
        return UPLOAD_MAX_BODY_BYTES, UPLOAD_TIMEOUT_S, True
    return MAX_BODY_BYTES, BODY_TIMEOUT_S, False


def _refuse_keyless(line: bytes, headers) -> None:
    """Every API call needs a key: a body sent to the API without one is refused from the
    headers, before a byte of it is read."""
    has_body = _header(headers, b"transfer-encoding") or (
        _header(headers, b"content-length") or b"0"
    ).lstrip(b"0")
    if has_body and _path(line).startswith(API_PREFIXES) and not _header(headers, b"authorization"):
        body = _error_body(line, 401, "not_authenticated", "authorization", KEYLESS)
        raise BadRequest(401, KEYLESS, body)


def _check_framing(headers, most: int) -> None:
    """A body's framing as the head declares it: one of Content-Length (digits, within `most`)
    and chunked Transfer-Encoding, or neither."""
    chunked = (_header(headers, b"transfer-encoding") or b"").lower()
    length = _header(headers, b"content-length")
    if chunked and length is not None:
        raise BadRequest(400, "both Content-Length and Transfer-Encoding")
    if chunked and chunked != b"chunked":
        raise BadRequest(501, "unsupported Transfer-Encoding")
    if length is not None and not length.isdigit():
        raise BadRequest(400, "malformed Content-Length")
    if length is not None and int(length) > most:
        raise TooLarge(int(length), most)


async def _body(reader, writer, headers, most: int, body: RequestBody) -> None:
    """The body, whose framing _check_framing passed, read into `body`."""
    chunked = (_header(headers, b"transfer-encoding") or b"").lower()
    length = _header(headers, b"content-length")
    if (_header(headers, b"expect") or b"").lower() == b"100-continue" and (chunked or length):
        writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        await writer.drain()
    if chunked:
        await _chunked(reader, body, most)
    elif length:
        await _exactly(reader, int(length), body)


async def _exactly(reader: asyncio.StreamReader, count: int, body: RequestBody) -> None:
    while count:
        piece = await reader.read(min(count, PIECE_BYTES))
        if not piece:
            raise asyncio.IncompleteReadError(b"", count)
        body.write(piece)
        count -= len(piece)


async def _chunked(reader: asyncio.StreamReader, body: RequestBody, most: int) -> None:
    while True:
        size_line = await reader.readuntil(b"\r\n")
        size = size_line[:-2].split(b";")[0].rstrip(b" \t")
        if not _CHUNK_SIZE.fullmatch(size):
            raise BadRequest(400, "malformed chunk size")
        count = int(size, 16)
        if body.length + count > most:
            raise TooLarge(body.length + count, most)
        if count == 0:
            while await reader.readuntil(b"\r\n") != b"\r\n":
                pass  # trailers, dropped
            return
        await _exactly(reader, count, body)
        if await reader.readexactly(2) != b"\r\n":
            raise BadRequest(400, "malformed chunk")


def _too_large(line: bytes, length: int, most: int) -> BadRequest:
    message = f"body: request body is {length} bytes or more; the limit is {most}."
    return BadRequest(413, message, _error_body(line, 413, "payload_too_large", "body", message))


def _error_body(line: bytes, status: int, code: str, field: str, message: str) -> bytes:
    """A refusal in the error shape of the API the path is under, as the web process answers:
    OpenAI's on /v1/, the native API's elsewhere (pathfinder_site.middleware)."""
    if _path(line).startswith(b"/v1/"):
        error = {"message": message, "type": "invalid_request_error", "param": field,
                 "code": code}  # fmt: skip
    else:
        error = {"status": status, "code": code, "field": field, "message": message}
    return json.dumps({"error": error}).encode()


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


def _upstream_head(line: bytes, headers, length: int, peer: str) -> bytes:
    forwarded = [value for key, value in headers if key.lower() == b"x-forwarded-for"]
    trusted = trusted_proxy(peer)
    dropped = HOP_BY_HOP | {b"x-forwarded-for"} | (frozenset() if trusted else SCHEME_CLAIMS)
    kept = [(key, value) for key, value in headers if key.lower() not in dropped]
    if not trusted:  # the front speaks plain HTTP, and says so
        kept.append((b"X-Forwarded-Proto", b"http"))
    chain = b", ".join([*forwarded, peer.encode()])
    kept += [
        (b"X-Forwarded-For", chain),
        (b"Content-Length", str(length).encode()),
        (b"Connection", b"close"),
    ]
    return b"\r\n".join([line, *(key + b": " + value for key, value in kept)]) + b"\r\n\r\n"


async def _send(up_writer: asyncio.StreamWriter, head: bytes, body: RequestBody) -> None:
    with contextlib.suppress(ConnectionError):  # gunicorn answered early and closed
        up_writer.write(head)
        for piece in body.pieces():
            up_writer.write(piece)
            await up_writer.drain()
        await up_writer.drain()


async def _relay(up_reader, client_reader, client_writer) -> None:
    """gunicorn's response to the client as it comes, until it ends or the client leaves. What
    the client has not yet taken waits in a spool (on disk past a little), so gunicorn's thread
    is free once it has answered; a client that takes nothing for SEND_TIMEOUT_S is cut."""
    spool = ResponseSpool()

    async def fill() -> None:
        with contextlib.suppress(ConnectionError):
            while chunk := await up_reader.read(PIECE_BYTES):
                await spool.put(chunk)
        await spool.end()

    async def send() -> None:
        while (chunk := await spool.get()) is not None:
            client_writer.write(chunk)
            await asyncio.wait_for(client_writer.drain(), SEND_TIMEOUT_S)

    async def client_left() -> None:
        while await client_reader.read(4096):
            pass  # anything more from the client is ignored: one request per connection

    filling = asyncio.ensure_future(fill())
    sending = asyncio.ensure_future(send())
    watching = asyncio.ensure_future(client_left())
    try:
        waiting = {filling, sending, watching}
        while sending in waiting and watching in waiting:
            done, waiting = await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
            if filling in done and filling.exception() is not None:
                raise filling.exception()  # the spool's disk failed: cut the client
        if sending.done():
            sending.result()  # a client that took nothing for SEND_TIMEOUT_S: TimeoutError
    finally:
        for task in (filling, sending, watching):
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError, ConnectionError, TimeoutError):
            await sending
        spool.close()


async def _linger(reader: asyncio.StreamReader) -> None:
    """Read and drop what the client still sends after a refusal, for a while (nginx's lingering
    close): a client that sends its whole body before reading sees the answer rather than a
    reset connection."""
    deadline = asyncio.get_running_loop().time() + LINGER_S
    with contextlib.suppress(TimeoutError, ConnectionError):
        while asyncio.get_running_loop().time() < deadline:
            if not await asyncio.wait_for(reader.read(PIECE_BYTES), LINGER_IDLE_S):
                return


async def _refuse(
    writer: asyncio.StreamWriter, status: int, reason: str = "", body: bytes | None = None
) -> None:
    phrases = {
        400: "Bad Request",
        401: "Unauthorized",
        408: "Request Timeout",
        413: "Content Too Large",
        431: "Request Header Fields Too Large",
        501: "Not Implemented",
        502: "Bad Gateway",
    }
    kind = b"application/json" if body is not None else b"text/plain"
    text = body if body is not None else (reason or phrases[status]).encode()
    writer.write(
        b"HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n"
        b"Connection: close\r\n\r\n%s" % (status, phrases[status].encode(), kind, len(text), text)
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

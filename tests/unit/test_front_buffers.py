"""The front's buffers (issue 41, item 1): a response spool that moves between memory and disk
keeps every byte in order whatever the pace of either side, holds at most MEMORY_BYTES in
memory, and makes a writer wait past its cap; a request body past MEMORY_BYTES lives on disk.
And the front's refusal, from the headers alone, of a body sent to the API without a key."""

import asyncio
import concurrent.futures
import json
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pathfinder_site import front, front_buffers
from pathfinder_site.front_buffers import RequestBody, ResponseSpool


def run(coroutine):
    # A loop of its own, in a thread: a browser test earlier in the run may hold this thread's.
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coroutine).result()


async def through_spool(chunks: list[bytes], reader_pauses: list[int]) -> tuple[bytes, int]:
    """Put every chunk while a slow reader takes them; (what it read, most bytes in memory)."""
    spool = ResponseSpool()
    most_in_memory = 0

    async def write():
        for chunk in chunks:
            await spool.put(chunk)
        await spool.end()

    async def read():
        nonlocal most_in_memory
        taken, turn = bytearray(), 0
        while (chunk := await spool.get()) is not None:
            most_in_memory = max(most_in_memory, spool.memory_bytes)
            taken += chunk
            for _ in range(reader_pauses[turn % len(reader_pauses)]):
                await asyncio.sleep(0)
            turn += 1
        return bytes(taken)

    writing = asyncio.ensure_future(write())
    taken = await read()
    await writing
    spool.close()
    return taken, most_in_memory


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 300 << 10), min_size=1, max_size=25),
    pauses=st.lists(st.integers(0, 4), min_size=1, max_size=6),
    seed=st.integers(0, 2**32),
)
def test_a_slow_reader_gets_every_byte_in_order(sizes, pauses, seed):
    rng = random.Random(seed)
    chunks = [rng.randbytes(size) for size in sizes]
    taken, most_in_memory = run(through_spool(chunks, pauses))
    assert taken == b"".join(chunks)
    assert most_in_memory <= front_buffers.MEMORY_BYTES


def test_a_writer_waits_once_the_spool_holds_its_cap(monkeypatch):
    monkeypatch.setattr(front_buffers, "RESPONSE_SPOOL_MAX_BYTES", 1 << 20)

    async def fill_without_reader():
        spool = ResponseSpool()
        put = 0
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.5):
                while True:
                    await spool.put(b"x" * (64 << 10))
                    put += 64 << 10
        spool.close()
        return put

    assert run(fill_without_reader()) == 1 << 20


def test_a_large_body_is_kept_on_disk_and_read_back_whole():
    body = RequestBody()
    data = random.Random(7).randbytes(3 << 20)
    for start in range(0, len(data), 100_000):
        body.write(data[start : start + 100_000])
    assert body.file._rolled  # on disk, not in memory
    assert body.length == len(data) and b"".join(body.pieces()) == data
    body.close()


@pytest.mark.parametrize(
    "line, headers, refused",
    [
        (b"POST /v1/files HTTP/1.1", [(b"Content-Length", b"104857600")], True),
        (b"POST /v1/chat/completions HTTP/1.1", [(b"Transfer-Encoding", b"chunked")], True),
        (b"POST /api/v1/jobs HTTP/1.1", [(b"Content-Length", b"12")], True),
        (b"POST /v1/files HTTP/1.1", [(b"Content-Length", b"9"), (b"Authorization", b"x")], False),
        (b"GET /v1/models HTTP/1.1", [], False),  # no body: gunicorn answers it
        (b"POST /v1/batches/b/cancel HTTP/1.1", [(b"Content-Length", b"0")], False),
        (b"POST /accounts/login/ HTTP/1.1", [(b"Content-Length", b"40")], False),  # a session
        (b"POST /portal/trails/ HTTP/1.1", [(b"Content-Length", b"40")], False),
    ],
)
def test_a_body_sent_to_the_api_without_a_key_is_refused_from_its_headers(line, headers, refused):
    headers = [(b"Host", b"x"), *headers]
    if not refused:
        front._refuse_keyless(line, headers)
        return
    with pytest.raises(front.BadRequest) as refusal:
        front._refuse_keyless(line, headers)
    assert refusal.value.status == 401
    error = json.loads(refusal.value.body)["error"]
    # Each API's own error shape: OpenAI's under /v1/, the native API's under /api/v1/.
    field = error["param"] if line.split(b" ")[1].startswith(b"/v1/") else error["field"]
    assert field == "authorization" and error["code"] == "not_authenticated"

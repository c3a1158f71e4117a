"""The front's two buffers, each holding a little in memory and the rest on disk, as nginx's
client_body_buffer_size and proxy_buffering do: a request's body read whole before gunicorn sees
it, and a response gunicorn has sent but the client has yet to take. So a large upload, or a
download to a client that reads slowly, costs disk rather than memory, and gunicorn's thread is
free as soon as it has answered, however slowly the client reads."""

from __future__ import annotations

import asyncio
import collections
import tempfile

# Kept in memory per connection before the rest goes to a temporary file.
MEMORY_BYTES = 256 << 10
PIECE_BYTES = 64 << 10
# How much of a response may wait on disk for a slow client; past it the front stops reading
# gunicorn until the client takes some (nginx's proxy_max_temp_file_size is 1 GiB).
RESPONSE_SPOOL_MAX_BYTES = 1 << 30


class RequestBody:
    """A request's body as it arrived: in memory up to MEMORY_BYTES, past that on disk."""

    def __init__(self):
        self.file = tempfile.SpooledTemporaryFile(max_size=MEMORY_BYTES)  # noqa: SIM115 (closed by close())
        self.length = 0

    def write(self, data: bytes) -> None:
        self.file.write(data)
        self.length += len(data)

    def pieces(self):
        """The body again, from its start, PIECE_BYTES at a time."""
        self.file.seek(0)
        while piece := self.file.read(PIECE_BYTES):
            yield piece

    def close(self) -> None:
        self.file.close()


class ResponseSpool:
    """Bytes between gunicorn and a client, in order: put() as they come from gunicorn, get()
    as the client takes them. In memory up to MEMORY_BYTES; past that, and until the client has
    caught up, on disk. put() waits while RESPONSE_SPOOL_MAX_BYTES are pending."""

    def __init__(self):
        self.memory: collections.deque[bytes] = collections.deque()
        self.memory_bytes = 0
        self.file = None  # while set, every new byte goes to it: nothing overtakes what is there
        self.file_read = self.file_written = 0
        self.pending = 0
        self.ended = False
        self.changed = asyncio.Condition()

    async def put(self, chunk: bytes) -> None:
        async with self.changed:
            await self.changed.wait_for(lambda: self.pending < RESPONSE_SPOOL_MAX_BYTES)
            if self.file is None and self.memory_bytes + len(chunk) <= MEMORY_BYTES:
                self.memory.append(chunk)
                self.memory_bytes += len(chunk)
            else:
                if self.file is None:
                    self.file = tempfile.TemporaryFile()  # noqa: SIM115 (closed by close())
                self.file.seek(self.file_written)
                self.file.write(chunk)
                self.file_written += len(chunk)
            self.pending += len(chunk)
            self.changed.notify_all()

    async def end(self) -> None:
        async with self.changed:
            self.ended = True
            self.changed.notify_all()

    async def get(self) -> bytes | None:
        """The next bytes for the client, waiting for them; None once the response ended."""
        async with self.changed:
            await self.changed.wait_for(lambda: self.pending or self.ended)
            if not self.pending:
                return None
            chunk = self._take()
            self.pending -= len(chunk)
            self.changed.notify_all()
            return chunk

    def _take(self) -> bytes:
        if self.memory:  # memory holds only bytes older than the file's
            chunk = self.memory.popleft()
            self.memory_bytes -= len(chunk)
            return chunk
        self.file.seek(self.file_read)
        chunk = self.file.read(PIECE_BYTES)
        self.file_read += len(chunk)
        if self.file_read == self.file_written:  # caught up: back to memory
            self.close()
        return chunk

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None
            self.file_read = self.file_written = 0

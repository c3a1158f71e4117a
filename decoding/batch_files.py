"""A Batch API file's bytes, kept in parts (BatchFilePart) and read and written a part at a time:
an upload is stored as it is read, a download streams, a batch's output is written as its lines
are shaped, and no file meets PostgreSQL's 1 GiB limit on one value. No step holds a whole file
in memory."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from decoding.models import BatchFile, BatchFilePart

PART_BYTES = 1 << 20
BOM = b"\xef\xbb\xbf"  # a UTF-8 byte-order mark (Notepad's, PowerShell 5's): not part of a line


class FileWriter:
    """A new file, its bytes written as they come. Use inside a transaction: a file that fails
    half-way is rolled back with it."""

    def __init__(self, **fields):
        self.file = BatchFile.objects.create(bytes=0, line_count=0, **fields)
        self.pending = bytearray()
        self.parts = 0

    def write(self, data: bytes) -> None:
        self.file.bytes += len(data)
        self.pending += data
        while len(self.pending) >= PART_BYTES:
            self._store(bytes(self.pending[:PART_BYTES]))
            del self.pending[:PART_BYTES]

    def close(self, line_count: int) -> BatchFile:
        if self.pending:
            self._store(bytes(self.pending))
            self.pending.clear()
        self.file.line_count = line_count
        self.file.save(update_fields=["bytes", "line_count"])
        return self.file

    def _store(self, data: bytes) -> None:
        BatchFilePart.objects.create(file=self.file, index=self.parts, data=data)
        self.parts += 1


def pieces(stored: BatchFile) -> Iterator[bytes]:
    """The file's bytes, a part (one query) at a time; it ends early if the file is deleted."""
    index = 0
    while True:
        part = (
            BatchFilePart.objects.filter(file_id=stored.pk, index=index)
            .values_list("data", flat=True)
            .first()
        )
        if part is None:
            return
        yield bytes(part)
        index += 1


class NotUtf8(ValueError):
    """A file's bytes are not UTF-8 text from `offset` (0-based, in the whole file)."""

    def __init__(self, offset: int):
        super().__init__(f"not UTF-8 from byte {offset}")
        self.offset = offset


def raw_lines(chunks: Iterable[bytes]) -> Iterator[tuple[int, int, bytes]]:
    """(1-based line number, offset of its first byte, its bytes) of each line, split at b"\n"
    (which no other UTF-8 character contains), a BOM before the first dropped. Each chunk is
    split once, so a long line costs its length, not its length times the chunks it spans."""
    chunks = _without_bom(iter(chunks))
    offset = next(chunks)
    number, carried = 1, []
    for chunk in chunks:
        split = chunk.split(b"\n")
        if len(split) == 1:
            carried.append(chunk)
            continue
        for line in [b"".join([*carried, split[0]]), *split[1:-1]]:
            yield number, offset, line
            number, offset = number + 1, offset + len(line) + 1
        carried = [split[-1]]
    yield number, offset, b"".join(carried)


def _without_bom(chunks: Iterator[bytes]) -> Iterator:
    """How many bytes of BOM were dropped, then the chunks without it."""
    head = b""
    for chunk in chunks:
        head += chunk
        if len(head) >= len(BOM):
            break
    dropped = len(BOM) if head.startswith(BOM) else 0
    yield dropped
    yield head[dropped:]
    yield from chunks


def text_lines(chunks: Iterable[bytes]) -> Iterator[tuple[int, str]]:
    """(1-based line number, text) of each line that is not blank; NotUtf8 names the offset in
    the whole file of the first byte that is not UTF-8."""
    for number, offset, line in raw_lines(chunks):
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise NotUtf8(offset + exc.start) from None
        if text.strip():
            yield number, text

"""The arithmetic of the global log's Merkle tree as C2SP tlog-tiles: tile paths, and roots,
inclusion and consistency proofs computed from tiles in O(log n) hashes.

A tile is 256 consecutive hashes of one level of the tree (8,192 bytes when full). Level 0 holds
leaf hashes; each hash at level l >= 1 is the Merkle Tree Hash of one full tile of level l - 1,
so the n-th tile of level l holds MTH(D[(n*256 + i) * 256**l : (n*256 + i + 1) * 256**l]) for
i in 0..255 (c2sp.org/tlog-tiles). Any root or proof needs O(log n) subtree hashes; each subtree
of 2**k leaves is at most 128 hashes inside one tile, so a root, an inclusion proof or a
consistency proof reads a few tiles and hashes a few hundred times, whatever the size of the log.

Pure Python (no Django): where the leaves and the stored tiles come from is a subclass's
(audit.tiles reads them from the database).
"""

from __future__ import annotations

import re
import struct
from abc import ABC, abstractmethod

from audit.evidence import merkle

HEIGHT = 8
WIDTH = 1 << HEIGHT  # hashes in a full tile
_H = merkle.HASH_SIZE


def tile_path(level: int, index: int, width: int = WIDTH, *, entries: bool = False) -> str:
    """`tile/<L>/<N>[.p/<W>]` (or `tile/entries/<N>[.p/<W>]`), N in x-prefixed 3-digit parts."""
    digits = f"{index:03d}"
    digits = "0" * (-len(digits) % 3) + digits
    parts = [digits[i : i + 3] for i in range(0, len(digits), 3)]
    encoded = "/".join([*(f"x{part}" for part in parts[:-1]), parts[-1]])
    partial = f".p/{width}" if width < WIDTH else ""
    return f"tile/{'entries' if entries else level}/{encoded}{partial}"


_PATH = re.compile(
    r"tile/(?P<level>0|[1-9][0-9]?|entries)/(?P<index>(?:x[0-9]{3}/)*[0-9]{3})"
    r"(?:\.p/(?P<width>[1-9][0-9]{0,2}))?"
)


def parse_tile_path(path: str) -> tuple[int | None, int, int]:
    """(level, index, width) of a tile path; level None for an entry bundle. ValueError when
    the path is not one the spec allows (leading zeros, a level over 63, a width over 255, an
    index part that is not the canonical encoding)."""
    match = _PATH.fullmatch(path)
    if match is None:
        raise ValueError(f"not a tile path: {path!r}")
    level = None if match["level"] == "entries" else int(match["level"])
    if level is not None and level > 63:
        raise ValueError("a tile level is at most 63")
    index = int(match["index"].replace("x", "").replace("/", ""))
    width = int(match["width"]) if match["width"] else WIDTH
    if match["width"] and width >= WIDTH:
        raise ValueError("a partial tile is 1 to 255 hashes wide")
    if tile_path(level or 0, index, width, entries=level is None) != path:
        raise ValueError(f"not the canonical path of its tile: {path!r}")
    return level, index, width


def fold(hashes: list[bytes]) -> bytes:
    """MTH of a power-of-two run of hashes of one level."""
    while len(hashes) > 1:
        hashes = [merkle.node_hash(hashes[i], hashes[i + 1]) for i in range(0, len(hashes), 2)]
    return hashes[0]


def split(data: bytes) -> list[bytes]:
    return [data[i : i + _H] for i in range(0, len(data), _H)]


class LogIncomplete(Exception):
    """The ledger or the stored tiles do not hold what a tree of the asked size needs."""


class TileTree(ABC):
    """The tiles of the tree of `size` leaves, each read once as needed (and kept for the life
    of this object: make one per request or per checkpoint)."""

    def __init__(self, size: int):
        self.size = size
        self._read: dict[tuple[int, int], bytes] = {}

    @abstractmethod
    def leaves(self, start: int, stop: int) -> list[bytes]:
        """The leaf data of entries start..stop-1 (LogIncomplete when any is missing)."""

    @abstractmethod
    def stored_tile(self, level: int, index: int) -> bytes | None:
        """A stored full tile's hashes, or None."""

    @abstractmethod
    def stored_roots(self, level: int, start: int, stop: int) -> dict[int, bytes]:
        """The roots of the stored full tiles start..stop-1 of `level`, by index."""

    def tile(self, level: int, index: int) -> bytes:
        """The hashes of tile (level, index) in this tree: full, or the partial rightmost one."""
        span = WIDTH**level
        start = index * WIDTH
        width = min(WIDTH, self.size // span - start)
        if width <= 0:
            raise LogIncomplete(f"the tree of {self.size} leaves has no tile {level}/{index}")
        key = (level, index)
        if key not in self._read:
            stored = self.stored_tile(level, index) if width == WIDTH else None
            if stored is not None:
                self._read[key] = stored
            elif level == 0:
                leaves = self.leaves(start, start + width)
                self._read[key] = b"".join(merkle.leaf_hash(leaf) for leaf in leaves)
            else:
                self._read[key] = b"".join(self._roots_below(level, start, width))
        return self._read[key][: width * _H]

    def _roots_below(self, level: int, start: int, width: int) -> list[bytes]:
        """The roots of the full tiles start..start+width-1 of level - 1."""
        roots = self.stored_roots(level - 1, start, start + width)
        if len(roots) == width:
            return [roots[i] for i in range(start, start + width)]
        # Tiles not stored yet (no checkpoint has been made since they filled): from below.
        return [fold(split(self.tile(level - 1, i))) for i in range(start, start + width)]

    def subtree(self, start: int, count: int) -> bytes:
        """MTH(D[start : start + count]) of a perfect subtree (count a power of two, start a
        multiple of it)."""
        k = count.bit_length() - 1
        level, run = divmod(k, HEIGHT)
        span = WIDTH**level
        first = start // span  # index of its first hash at `level`
        tile = split(self.tile(level, first // WIDTH))
        offset = first % WIDTH
        return fold(tile[offset : offset + (1 << run)])

    def mth(self, start: int, stop: int) -> bytes:
        """MTH(D[start:stop]) for a range the RFC 6962 recursion makes."""
        n = stop - start
        if n == 0:
            return merkle.EMPTY_ROOT
        if n & (n - 1) == 0 and start % n == 0:
            return self.subtree(start, n)
        k = 1 << ((n - 1).bit_length() - 1)
        return merkle.node_hash(self.mth(start, start + k), self.mth(start + k, stop))

    def root(self) -> bytes:
        return self.mth(0, self.size)

    def inclusion_proof(self, index: int) -> list[bytes]:
        """RFC 6962 §2.1.1 audit path of leaf `index` in this tree."""
        if not 0 <= index < self.size:
            raise ValueError(f"leaf index {index} is outside a tree of size {self.size}")
        proof: list[bytes] = []
        start, stop = 0, self.size
        while stop - start > 1:
            k = 1 << ((stop - start - 1).bit_length() - 1)
            if index < start + k:
                proof.append(self.mth(start + k, stop))
                stop = start + k
            else:
                proof.append(self.mth(start, start + k))
                start += k
        return proof[::-1]

    def consistency_proof(self, old_size: int) -> list[bytes]:
        """RFC 6962 §2.1.2 proof that the tree of `old_size` leaves is a prefix of this one."""
        if not 0 <= old_size <= self.size:
            raise ValueError(f"old size {old_size} is outside 0..{self.size}")
        if old_size in (0, self.size):
            return []
        proof: list[bytes] = []
        start, stop, complete = 0, self.size, True
        m = old_size
        while m != stop:
            k = 1 << ((stop - start - 1).bit_length() - 1)
            if m - start <= k:
                proof.append(self.mth(start + k, stop))
                stop = start + k
            else:
                proof.append(self.mth(start, start + k))
                start += k
                complete = False
        if not complete:
            proof.append(self.mth(start, stop))
        return proof[::-1]

    def entries(self, index: int) -> bytes:
        """The entry bundle of level-0 tile `index`: each leaf's data, big-endian uint16
        length first."""
        start = index * WIDTH
        stop = min(start + WIDTH, self.size)
        if stop <= start:
            raise LogIncomplete(f"the tree of {self.size} leaves has no entry bundle {index}")
        return b"".join(struct.pack(">H", len(d)) + d for d in self.leaves(start, stop))

"""The global log's tiles as the database stores them: the reader of audit.evidence.tile_math's
tree, and
the full tiles stored when a checkpoint is made and checked by verify_chain.

Full tiles never change once the log has them: they are stored (audit.LogTile, append-only)
when a checkpoint is made. The rightmost, partial tiles of a tree are computed on demand from at
most 255 ledger entries or stored tile roots.
"""

from __future__ import annotations

from .evidence import merkle
from .evidence.tile_math import WIDTH, LogIncomplete, TileTree, fold, split, tile_path
from .models import LedgerEntry, LogTile


class Tiles(TileTree):
    """The tiles of the tree of `size` leaves, read from the ledger and the stored tiles."""

    def leaves(self, start: int, stop: int) -> list[bytes]:
        """The leaf data (ledger payloads, UTF-8) of entries start..stop-1."""
        payloads = (
            LedgerEntry.objects.filter(seq__gte=start, seq__lt=stop)
            .order_by("seq")
            .values_list("payload", flat=True)
        )
        data = [payload.encode("utf-8") for payload in payloads]
        if len(data) != stop - start:
            raise LogIncomplete(f"the ledger lacks entries in {start}..{stop - 1}")
        return data

    def stored_tile(self, level: int, index: int) -> bytes | None:
        row = LogTile.objects.filter(level=level, index=index).values_list("hashes").first()
        return bytes(row[0]) if row else None

    def stored_roots(self, level: int, start: int, stop: int) -> dict[int, bytes]:
        rows = LogTile.objects.filter(level=level, index__gte=start, index__lt=stop)
        return {index: bytes(root) for index, root in rows.values_list("index", "root")}


def tiles_extend(size: int) -> int:
    """Store every full tile that the first `size` leaves complete and that is not stored yet;
    returns how many were stored. Run where checkpoints are made, before signing, so the tiles
    of every checkpoint's tree are there to serve."""
    stored = 0
    level, span = 0, WIDTH
    while size // span > 0:
        have = LogTile.objects.filter(level=level).count()
        full = size // span
        tiles = Tiles(size)
        for index in range(have, full):
            hashes = tiles.tile(level, index)
            # Another runner storing the same tile first is harmless: it is the same tile.
            LogTile.objects.bulk_create(
                [LogTile(level=level, index=index, hashes=hashes, root=fold(split(hashes)))],
                ignore_conflicts=True,
            )
            stored += 1
        level, span = level + 1, span * WIDTH
    return stored


def tile_failures(leaves: list[bytes]) -> list[str]:
    """Every stored tile against the tile the leaves make (its hashes and its root), one pass:
    a stored tile is what proofs and checkpoints are read from, so it is checked as a record
    would be."""
    expected: dict[int, list[bytes]] = {0: [merkle.leaf_hash(leaf) for leaf in leaves]}
    failures = []
    for tile in LogTile.objects.order_by("level", "index").iterator(chunk_size=200):
        level, index = tile.level, tile.index
        while level not in expected:  # the hashes of a level are the roots of full tiles below
            below = expected[max(expected)]
            full = len(below) // WIDTH
            expected[max(expected) + 1] = [
                fold(below[i * WIDTH : (i + 1) * WIDTH]) for i in range(full)
            ]
        hashes = expected[level][index * WIDTH : (index + 1) * WIDTH]
        label = f"stored tile {tile_path(level, index)}"
        if len(hashes) < WIDTH:
            failures.append(f"{label}: the log has no such full tile")
        elif bytes(tile.hashes) != b"".join(hashes):
            failures.append(f"{label}: its hashes differ from the ledger's")
        elif bytes(tile.root) != fold(hashes):
            failures.append(f"{label}: its stored root differs from its hashes'")
    return failures

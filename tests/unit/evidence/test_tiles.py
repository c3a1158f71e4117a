"""The tiled log (audit.evidence.tile_math) against the plain RFC 6962 functions
(audit.evidence.merkle): the same
roots, inclusion and consistency proofs, for sizes on and around every tile edge up to level 2;
and the tile paths exactly as c2sp.org/tlog-tiles writes them.

The tree's three reads are an in-memory ledger here (audit.tiles reads the database), so
trees of 70,000 leaves can be checked without storing them; tests/integration/test_log_tiles.py
covers the same through PostgreSQL."""

import hashlib
import random

import pytest

from audit.evidence import merkle
from audit.evidence.tile_math import WIDTH, TileTree, parse_tile_path, tile_path

LEAVES = [f"leaf {i}".encode() for i in range(70_000)]
LEAF_HASHES = [merkle.leaf_hash(leaf) for leaf in LEAVES]


class MemoryTiles(TileTree):
    """Tiles over LEAVES, with the full tiles below `stored_below` (leaves) 'stored'."""

    def __init__(self, size, stored_below=0):
        super().__init__(size)
        self.stored_below = stored_below
        self.leaf_reads = 0

    def leaves(self, start, stop):
        self.leaf_reads += stop - start
        return LEAVES[start:stop]

    def stored_tile(self, level, index):
        span = WIDTH**level
        if (index + 1) * WIDTH * span > self.stored_below:
            return None
        hashes = [
            merkle.root_from_hashes(
                LEAF_HASHES[(index * WIDTH + i) * span : (index * WIDTH + i + 1) * span]
            )
            for i in range(WIDTH)
        ]
        return b"".join(hashes)

    def stored_roots(self, level, start, stop):
        found = {}
        for index in range(start, stop):
            tile = self.stored_tile(level, index)
            if tile is not None:
                found[index] = merkle.root_from_hashes(
                    [tile[i : i + 32] for i in range(0, len(tile), 32)]
                )
        return found


def reference_root(size):
    return merkle.root_from_hashes(LEAF_HASHES[:size])


EDGES = [1, 2, 3, 255, 256, 257, 511, 512, 513, 1000, 65535, 65536, 65537, 70_000]


@pytest.mark.parametrize("size", EDGES)
def test_the_root_is_the_merkle_tree_hash(size):
    assert MemoryTiles(size).root() == reference_root(size)
    assert MemoryTiles(size, stored_below=size).root() == reference_root(size)


@pytest.mark.parametrize("size", [1, 2, 5, 256, 257, 1000, 4099])
def test_inclusion_proofs_match_rfc_6962_and_verify(size):
    tiles = MemoryTiles(size, stored_below=size // 2)
    root = tiles.root()
    for index in sorted(
        {0, size - 1, size // 2, *random.Random(size).sample(range(size), min(size, 6))}
    ):
        proof = tiles.inclusion_proof(index)
        assert proof == merkle.inclusion_proof(index, LEAVES[:size])
        assert merkle.verify_inclusion(index, size, LEAF_HASHES[index], proof, root)


@pytest.mark.parametrize(
    ("old", "new"), [(1, 2), (3, 7), (256, 257), (255, 513), (512, 1000), (1000, 4099), (7, 4099)]
)
def test_consistency_proofs_match_rfc_6962_and_verify(old, new):
    proof = MemoryTiles(new, stored_below=new).consistency_proof(old)
    assert proof == merkle.consistency_proof(old, LEAVES[:new])
    assert merkle.verify_consistency(old, new, reference_root(old), reference_root(new), proof)


def test_a_large_log_proves_from_a_few_reads_not_from_every_leaf():
    size = 70_000
    tiles = MemoryTiles(size, stored_below=size)
    index = 12_345
    proof = tiles.inclusion_proof(index)
    assert merkle.verify_inclusion(index, size, LEAF_HASHES[index], proof, reference_root(size))
    assert merkle.verify_consistency(
        65_537, size, reference_root(65_537), reference_root(size), tiles.consistency_proof(65_537)
    )
    # Only the rightmost partial tile's leaves are read (70,000 mod 256 = 112).
    assert tiles.leaf_reads <= 2 * WIDTH


def test_tile_paths_are_written_and_read_as_the_spec_writes_them():
    assert tile_path(0, 1234067) == "tile/0/x001/x234/067"
    assert tile_path(0, 0) == "tile/0/000"
    assert tile_path(1, 273, 17) == "tile/1/273.p/17"
    assert tile_path(0, 5, 112, entries=True) == "tile/entries/005.p/112"
    assert parse_tile_path("tile/2/x001/x234/067.p/8") == (2, 1234067, 8)
    assert parse_tile_path("tile/entries/000") == (None, 0, WIDTH)
    for bad in [
        "tile/0/67",
        "tile/01/000",
        "tile/0/000.p/0",
        "tile/0/000.p/256",
        "tile/64/000",
        "tile/0/x000/067",
        "tile/0/000.p/08",
    ]:
        with pytest.raises(ValueError):
            parse_tile_path(bad)


def test_a_full_tile_hashes_are_the_subtree_roots_the_spec_defines():
    tiles = MemoryTiles(70_000)
    level1 = tiles.tile(1, 0)
    assert len(level1) == WIDTH * 32
    assert level1[32 * 3 : 32 * 4] == merkle.root_from_hashes(LEAF_HASHES[3 * 256 : 4 * 256])
    # A tree of 70,000: level 0's rightmost tile is 112 wide, level 1's 17, level 2's 1.
    assert len(tiles.tile(0, 273)) == 112 * 32
    assert len(tiles.tile(1, 1)) == 17 * 32
    assert tiles.tile(2, 0) == reference_root(65536)
    assert hashlib.sha256(b"").digest() == MemoryTiles(0).root()

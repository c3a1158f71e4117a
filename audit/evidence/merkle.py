"""RFC 6962 / RFC 9162 Merkle tree hashing, inclusion and consistency proofs.

Pure Python (standard library only), so an auditor can run it next to an exported bundle.

The leaves of Pathfinder's global log are the ledger entries' payload texts (UTF-8 bytes) in ledger
seq order, so a leaf's index is its ledger seq. Functions that take `leaves` take the raw leaf data
(they hash it with `leaf_hash`); proofs, roots and `leaf_hash` values are 32-byte digests.

    leaf_hash(d)    = SHA-256(0x00 || d)
    node_hash(l, r) = SHA-256(0x01 || l || r)
    MTH([])         = SHA-256("")
    MTH([d])        = leaf_hash(d)
    MTH(D[n])       = node_hash(MTH(D[0:k]), MTH(D[k:n])), k the largest power of two < n
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence

HASH_SIZE = 32
EMPTY_ROOT = hashlib.sha256(b"").digest()


def leaf_hash(data: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + bytes(data)).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


def _split(n: int) -> int:
    """The largest power of two strictly smaller than n (n >= 2)."""
    return 1 << ((n - 1).bit_length() - 1)


def _mth(hashes: Sequence[bytes]) -> bytes:
    n = len(hashes)
    if n == 0:
        return EMPTY_ROOT
    if n == 1:
        return hashes[0]
    k = _split(n)
    return node_hash(_mth(hashes[:k]), _mth(hashes[k:]))


def root_from_hashes(hashes: Sequence[bytes]) -> bytes:
    """MTH of a tree given its leaf hashes (not the leaf data)."""
    return _mth(list(hashes))


def root(leaves: Sequence[bytes]) -> bytes:
    """The Merkle Tree Hash of the leaf data `leaves` (RFC 6962 §2.1)."""
    return _mth([leaf_hash(leaf) for leaf in leaves])


def _path(m: int, hashes: Sequence[bytes]) -> list[bytes]:
    n = len(hashes)
    if n <= 1:
        return []
    k = _split(n)
    if m < k:
        return _path(m, hashes[:k]) + [_mth(hashes[k:])]
    return _path(m - k, hashes[k:]) + [_mth(hashes[:k])]


def inclusion_proof(index: int, leaves: Sequence[bytes]) -> list[bytes]:
    """The audit path of leaf `index` in the tree of all `leaves` (RFC 6962 §2.1.1)."""
    if not 0 <= index < len(leaves):
        raise ValueError(f"leaf index {index} is outside a tree of size {len(leaves)}")
    return _path(index, [leaf_hash(leaf) for leaf in leaves])


def _subproof(m: int, hashes: Sequence[bytes], complete: bool) -> list[bytes]:
    n = len(hashes)
    if m == n:
        return [] if complete else [_mth(hashes)]
    k = _split(n)
    if m <= k:
        return _subproof(m, hashes[:k], complete) + [_mth(hashes[k:])]
    return _subproof(m - k, hashes[k:], False) + [_mth(hashes[:k])]


def consistency_proof(old_size: int, leaves: Sequence[bytes]) -> list[bytes]:
    """Proof that the tree of the first `old_size` leaves is a prefix of the tree of all `leaves`
    (RFC 6962 §2.1.2). Empty when old_size is 0 or equals the new size."""
    n = len(leaves)
    if not 0 <= old_size <= n:
        raise ValueError(f"old size {old_size} is outside 0..{n}")
    if old_size in (0, n):
        return []
    return _subproof(old_size, [leaf_hash(leaf) for leaf in leaves], True)


def _is_hash(value: object) -> bool:
    return isinstance(value, (bytes, bytearray)) and len(value) == HASH_SIZE


def _valid_proof(proof: object) -> bool:
    return isinstance(proof, (list, tuple)) and all(_is_hash(p) for p in proof)


def verify_inclusion(
    index: int, size: int, leaf_hash: bytes, proof: Sequence[bytes], root: bytes
) -> bool:
    """RFC 9162 §2.1.3.2: does `proof` show that `leaf_hash` is leaf `index` of the tree of
    `size` leaves whose root is `root`? Malformed input gives False, never an exception."""
    if not (isinstance(index, int) and isinstance(size, int)) or isinstance(index, bool):
        return False
    if not (_is_hash(leaf_hash) and _is_hash(root) and _valid_proof(proof)):
        return False
    if not 0 <= index < size:
        return False
    fn, sn = index, size - 1
    r = bytes(leaf_hash)
    for p in proof:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            r = node_hash(bytes(p), r)
            if not fn & 1:
                while not fn & 1 and fn != 0:
                    fn >>= 1
                    sn >>= 1
        else:
            r = node_hash(r, bytes(p))
        fn >>= 1
        sn >>= 1
    return sn == 0 and r == bytes(root)


def verify_consistency(
    old_size: int, new_size: int, old_root: bytes, new_root: bytes, proof: Sequence[bytes]
) -> bool:
    """RFC 9162 §2.1.4.2: does `proof` show that the tree of `old_size` leaves with root
    `old_root` is a prefix of the tree of `new_size` leaves with root `new_root`?

    The degenerate cases: from an empty tree (old_root must be the empty root) and between equal
    sizes (roots must be equal) the proof must be empty. Malformed input gives False.
    """
    if not (isinstance(old_size, int) and isinstance(new_size, int)):
        return False
    if not (_is_hash(old_root) and _is_hash(new_root) and _valid_proof(proof)):
        return False
    if not 0 <= old_size <= new_size:
        return False
    old_root, new_root = bytes(old_root), bytes(new_root)
    if old_size == 0:
        return len(proof) == 0 and old_root == EMPTY_ROOT
    if old_size == new_size:
        return len(proof) == 0 and old_root == new_root
    if len(proof) == 0:
        return False
    path = [bytes(p) for p in proof]
    if old_size & (old_size - 1) == 0:  # an exact power of two: the old root is a node of the path
        path.insert(0, old_root)
    fn, sn = old_size - 1, new_size - 1
    while fn & 1:
        fn >>= 1
        sn >>= 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            fr = node_hash(c, fr)
            sr = node_hash(c, sr)
            if not fn & 1:
                while not fn & 1 and fn != 0:
                    fn >>= 1
                    sn >>= 1
        else:
            sr = node_hash(sr, c)
        fn >>= 1
        sn >>= 1
    return fr == old_root and sr == new_root and sn == 0


def roots_at(leaves: Iterable[bytes], sizes: Iterable[int]) -> dict[int, bytes]:
    """The Merkle Tree Hash of the first `size` leaves, for each size asked, in one pass over
    the leaves (O(n + k log n), not O(n) per size): the roots of the perfect subtrees seen so
    far, folded from the right, are the root of the tree of that size. Sizes past the last leaf
    are left out."""
    wanted = sorted(set(sizes))
    found: dict[int, bytes] = {}
    stack: list[tuple[int, bytes]] = []  # (height, hash) of perfect subtrees, left to right
    position = 0

    def fold() -> bytes:
        if not stack:
            return EMPTY_ROOT
        root = stack[-1][1]
        for _, left in reversed(stack[:-1]):
            root = node_hash(left, root)
        return root

    while position < len(wanted) and wanted[position] == 0:
        found[0], position = EMPTY_ROOT, position + 1
    for count, leaf in enumerate(leaves, start=1):
        if position == len(wanted):
            break
        stack.append((0, leaf_hash(leaf)))
        while len(stack) > 1 and stack[-1][0] == stack[-2][0]:
            (height, right), (_, left) = stack.pop(), stack.pop()
            stack.append((height + 1, node_hash(left, right)))
        if count == wanted[position]:
            found[count], position = fold(), position + 1
    return found

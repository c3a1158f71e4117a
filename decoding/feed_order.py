"""The order a batch's lines are fed in: lines that share a document side by side.

A line's feed key is a digest of each 64-token block of its prompt, chained (each block's
digest covers every token before it), then one of the tail. Two lines share their first n
digests exactly when their prompts share their first n blocks, so ordering a batch's lines by
key puts those with the longest shared prefix next to each other, whatever their order in the
file, and the feeder (decoding.batches) sends a document's lines together: the worker evaluates
the document once and decodes its questions in the same passes (issue 42). The key is compared
within one batch only, which is one matter's.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Sequence

BLOCK_TOKENS = 64
_DIGEST = 4  # bytes a block: a chance collision only misplaces a line in the order
_MOST_BLOCKS = 512  # 2 KiB at most, within a btree index entry; longer prompts share the rest


def feed_key(token_ids: Sequence[int]) -> bytes:
    """The line's feed key: its full blocks' chained digests, then its tail's (always one, so
    a key's full blocks are all but its last digest)."""
    full = min(len(token_ids) // BLOCK_TOKENS, _MOST_BLOCKS)
    digest, key = b"", bytearray()
    for block in range(full + 1):
        tokens = token_ids[block * BLOCK_TOKENS : (block + 1) * BLOCK_TOKENS]
        if block == full:
            tokens = token_ids[block * BLOCK_TOKENS :]
        digest = hashlib.blake2b(
            digest + struct.pack(f"<{len(tokens)}q", *tokens), digest_size=_DIGEST
        ).digest()
        key += digest
    return bytes(key)


def shared_blocks(a: bytes, b: bytes) -> int:
    """How many full 64-token blocks the two keys' prompts share, from the start."""
    full = min(len(a), len(b)) // _DIGEST - 1
    shared = 0
    while (
        shared < full
        and a[shared * _DIGEST : (shared + 1) * _DIGEST]
        == b[shared * _DIGEST : (shared + 1) * _DIGEST]
    ):
        shared += 1
    return shared


def document_digest(token_ids: Sequence[int]) -> bytes | None:
    """The digest a job's document is routed to a worker by (decoding.affinity): its prompt's
    first block, which every question of a document that opens the prompt shares whatever its
    own length (a deeper block would split a document's questions whose lengths straddle it).
    None for a prompt shorter than a block: nothing worth keeping on one worker."""
    if len(token_ids) < BLOCK_TOKENS:
        return None
    return feed_key(token_ids[:BLOCK_TOKENS])[:_DIGEST]

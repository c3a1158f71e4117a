"""Saved KV states of recent prompts, so a question about a document seen lately skips its prefill.

A reviewer asks several questions about one document, interleaved with other documents; each
prompt repeats the document, so the state after an earlier prompt holds most of the next one's
prefill. Entries are whole prompts' states, least recently used first out, bounded in bytes.
A lookup finds the entry sharing the longest prefix with a new prompt; the provider restores it
and evaluates only what differs. The cache knows nothing of llama.cpp: a state is opaque bytes.

Every entry belongs to the wall (a matter) whose call saved it, and a lookup sees only its own
wall's entries: a prompt of another matter sharing a document with one seen here finds nothing,
and is evaluated, and so timed and counted, as a fresh one (docs/adr/0024). The bound in bytes
is the worker's, one least-recently-used order over every wall: how soon an entry goes tells
another matter how much the worker was used (load), never what was sent.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class SavedPrompt:
    wall: Hashable
    tokens: tuple[int, ...]
    state: object  # the runtime's saved state (a buffer supporting len())
    nbytes: int


@dataclass(frozen=True)
class Hit:
    saved: SavedPrompt
    shared: int  # leading tokens the new prompt shares with the saved one


class PromptCache:
    def __init__(self, capacity_bytes: int) -> None:
        if capacity_bytes < 0:
            raise ValueError(f"capacity_bytes must be at least 0, got {capacity_bytes}")
        self.capacity_bytes = capacity_bytes
        # (wall, tokens) -> the state after tokens
        self._entries: OrderedDict[tuple[Hashable, tuple[int, ...]], SavedPrompt] = OrderedDict()
        self.nbytes = 0

    def __len__(self) -> int:
        return len(self._entries)

    def longest(self, tokens: Sequence[int], *, wall: Hashable) -> Hit | None:
        """The saved prompt of `wall` sharing the most leading tokens with `tokens` (None if
        none shares any); it becomes the most recently used. Other walls' entries are not
        looked at."""
        best: Hit | None = None
        wanted = np.asarray(tokens, dtype=np.int64)
        for (owner, key), saved in self._entries.items():
            if owner != wall:
                continue
            shared = _shared_prefix(wanted, np.asarray(key, dtype=np.int64))
            if shared and (best is None or shared > best.shared):
                best = Hit(saved, shared)
        if best is not None:
            self._entries.move_to_end((wall, best.saved.tokens))
        return best

    def put(self, tokens: Sequence[int], state: object, nbytes: int, *, wall: Hashable) -> bool:
        """Keep the state after `tokens` for `wall`'s later prompts, evicting the least recently
        used to make room. False (nothing kept) when one state alone exceeds the capacity."""
        key = (wall, tuple(tokens))
        if nbytes > self.capacity_bytes:
            return False
        if key in self._entries:
            self.nbytes -= self._entries.pop(key).nbytes
        while self._entries and self.nbytes + nbytes > self.capacity_bytes:
            _, evicted = self._entries.popitem(last=False)
            self.nbytes -= evicted.nbytes
        self._entries[key] = SavedPrompt(wall, key[1], state, nbytes)
        self.nbytes += nbytes
        return True

    def forget(self, wall: Hashable) -> int:
        """Drop every entry of `wall` (its matter's texts were destroyed); returns how many."""
        keys = [key for key in self._entries if key[0] == wall]
        for key in keys:
            self.nbytes -= self._entries.pop(key).nbytes
        return len(keys)


def _shared_prefix(a: np.ndarray, b: np.ndarray) -> int:
    n = min(len(a), len(b))
    differs = np.flatnonzero(a[:n] != b[:n])
    return int(differs[0]) if len(differs) else n

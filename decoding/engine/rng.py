"""Counter-based randomness: every draw is a pure function of where it is used, so runs replay.

    uniform(seed, step, position, stream)
        = (int.from_bytes(SHA-256(M)[:8], "big") >> 11) / 2**53
    where M = "PF-RNG-v1" NUL seed NUL step NUL position NUL stream, UTF-8 encoded,
    with seed, step and position written as base-10 integers without leading zeros.

    output_uniform(seed, index)
        = the same of M = "PF-RNG-v2" NUL seed NUL index NUL "sample"
    where index is the output position (0 for the first generated token): the one draw the
    token at that position is taken with, by the target and by a draft model alike (coupled
    sampling, audit format 5; ADR 0032). It depends on nothing the schedule, the draft or the
    shared pass decide, so the same seed gives the same tokens.

The result is an integer multiple of 2**-53 in [0, 1), so it is an exact IEEE 754 binary64 value
that any language re-derives bit for bit. Streams: "draft" (sampling a drafted token),
"accept" (the accept test), "residual" (resampling after a rejection), "bonus" (the extra token
after a fully accepted draft). Keying by (seed, step, position) is invariant 4
(docs/architecture.md).
"""

from __future__ import annotations

import hashlib
from typing import Literal

Stream = Literal["draft", "accept", "residual", "bonus"]


def uniform(seed: int, step: int, position: int, stream: Stream) -> float:
    return _draw(f"PF-RNG-v1\x00{seed}\x00{step}\x00{position}\x00{stream}")


def output_uniform(seed: int, index: int) -> float:
    return _draw(f"PF-RNG-v2\x00{seed}\x00{index}\x00sample")


def _draw(message: str) -> float:
    top64 = int.from_bytes(hashlib.sha256(message.encode()).digest()[:8], "big")
    return (top64 >> 11) / 2**53

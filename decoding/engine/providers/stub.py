"""A deterministic offline model: logits drawn from a stable hash of the last few tokens."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np

from ..version import ENGINE_VERSION
from .base import ModelIdentity, Provider


def _normal(key_seed: int, vocab_size: int, suffix: Sequence[int]) -> np.ndarray:
    # sha256, not hash(): Python salts str hashes per process, which would break replay.
    tokens = ",".join(str(token) for token in suffix)
    digest = hashlib.sha256(f"stub-v1:{key_seed}:{vocab_size}:{tokens}".encode()).digest()
    generator = np.random.default_rng(int.from_bytes(digest[:8], "big"))
    return generator.standard_normal(vocab_size)


class StubProvider(Provider):
    """An order-`order` Markov model with Gaussian logits scaled by `sharpness`.

    With noise > 0, an independent Gaussian keyed by noise_seed is added, so
    StubProvider(seed=s, noise_seed=n, noise=0.5) is a cheap draft correlated with the target
    StubProvider(seed=s): it agrees often but not always, as a distilled draft model does.
    """

    def __init__(
        self,
        vocab_size: int = 32,
        seed: int = 0,
        noise_seed: int | None = None,
        noise: float = 0.0,
        order: int = 4,
        sharpness: float = 2.0,
        name: str = "stub",
    ) -> None:
        if vocab_size < 1:
            raise ValueError(f"vocab_size must be at least 1, got {vocab_size}")
        if order < 0:
            raise ValueError(f"order must be at least 0, got {order}")
        if noise < 0:
            raise ValueError(f"noise must be at least 0, got {noise}")
        if noise > 0 and noise_seed is None:
            raise ValueError("noise needs a noise_seed")
        self.vocab_size = vocab_size
        self._seed = seed
        self._noise_seed = noise_seed
        self._noise = float(noise)
        self._order = order
        self._sharpness = float(sharpness)
        revision = (
            f"stub-v1 seed={seed} noise_seed={noise_seed} noise={self._noise} "
            f"vocab={vocab_size} order={order} sharpness={self._sharpness}"
        )
        self.identity = ModelIdentity(
            name=name,
            revision=revision,
            sha256=hashlib.sha256(revision.encode()).hexdigest(),
            runtime="pathfinder-stub",
            runtime_version=ENGINE_VERSION,
        )

    def _row(self, prefix: Sequence[int]) -> np.ndarray:
        suffix = prefix[max(0, len(prefix) - self._order) :]
        row = _normal(self._seed, self.vocab_size, suffix) * self._sharpness
        if self._noise > 0:
            row = row + self._noise * _normal(self._noise_seed, self.vocab_size, suffix)
        return row

    def logits(self, context: Sequence[int], num_positions: int) -> np.ndarray:
        first = len(context) - num_positions + 1
        return np.stack([self._row(context[: first + t]) for t in range(num_positions)])

"""Drafting with a smaller model that shares the target's tokenizer."""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import numpy as np

from ..params import GenerationParams
from ..providers.base import Provider
from ..rng import output_uniform, uniform
from ..sampling import sample
from .base import Draft, Drafter, Reference


class DraftModelDrafter(Drafter):
    """Runs the draft model autoregressively, one forward pass per proposed token."""

    def __init__(self, provider: Provider) -> None:
        self._provider = provider
        self.identity = provider.identity
        self.vocab_size = provider.vocab_size

    def walled(self, wall: Hashable) -> DraftModelDrafter:
        return DraftModelDrafter(self._provider.walled(wall))

    def forget_wall(self, wall: Hashable) -> None:
        self._provider.forget_wall(wall)

    def prefill(self, context: Sequence[int], references: Sequence[Reference] = ()) -> None:
        self._provider.prefill(context)  # a model drafts from its own weights, not references

    def propose(
        self,
        context: Sequence[int],
        k: int,
        params: GenerationParams,
        *,
        seed: int,
        step: int,
        position: int | None = None,
    ) -> Draft:
        extended = list(context)
        q = np.empty((k, self.vocab_size))
        for i in range(k):
            q[i] = self._provider.next_distributions(extended, 1, params)[0]
            if params.is_greedy:
                token = int(np.argmax(q[i]))
            elif position is not None:  # coupled: the target's token here takes the same draw
                token = sample(q[i], output_uniform(seed, position + i))
            else:
                token = sample(q[i], uniform(seed, step, i, "draft"))
            extended.append(token)
        return Draft(tokens=np.array(extended[len(context) :], dtype=np.int64), q=q)

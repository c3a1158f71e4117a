"""The models a worker decodes with, built once per process and reused by every job.

Until real models land (issue #3) this is the deterministic stub pair: a target and a correlated,
noisier draft over the same vocabulary.
"""

from functools import cache

from django.conf import settings

from decoding.engine import Drafter, DraftModelDrafter, Provider, StubProvider


@cache
def model_pair() -> tuple[Drafter, Provider]:
    vocab_size = settings.PATHFINDER_STUB_VOCAB_SIZE
    target = StubProvider(vocab_size=vocab_size, seed=0, name="stub-target")
    draft = StubProvider(
        vocab_size=vocab_size,
        seed=0,
        noise_seed=1,
        noise=settings.PATHFINDER_STUB_DRAFT_NOISE,
        name="stub-draft",
    )
    return DraftModelDrafter(draft), target


def vocab_size() -> int:
    return model_pair()[1].vocab_size

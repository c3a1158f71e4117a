"""A draft and a target with different vocabularies cannot be paired."""

from __future__ import annotations

import pytest

from decoding.engine import DraftModelDrafter, SpeculativeDecoder
from decoding.engine.providers.transformers_hf import TransformersProvider


def test_a_pair_with_different_vocabularies_is_refused_at_configuration(
    tiny_models, make_llama, sink
):
    tiny = TransformersProvider(tiny_models["tiny2"], name="tiny2")
    smollm2 = make_llama()
    with pytest.raises(ValueError, match=r"draft vocabulary \(30 tokens\).*\(49152 tokens\)"):
        SpeculativeDecoder(DraftModelDrafter(tiny), smollm2, sink)

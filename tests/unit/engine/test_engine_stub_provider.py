import hashlib

import numpy as np
import pytest

from decoding.engine import ENGINE_VERSION, GenerationParams, StubProvider


def test_it_is_a_pure_function_of_its_parameters_and_the_context():
    context = [3, 1, 4, 1, 5]
    first = StubProvider(seed=7).logits(context, 3)
    again = StubProvider(seed=7).logits(list(context), 3)
    assert np.array_equal(first, again)
    assert not np.array_equal(first, StubProvider(seed=8).logits(context, 3))


def test_row_t_scores_the_token_after_the_matching_trailing_prefix():
    stub, context = StubProvider(), (9, 2, 6, 5, 3, 5)
    rows = stub.logits(context, 4)
    for t in range(4):
        prefix = context[: len(context) - 4 + 1 + t]
        assert np.array_equal(rows[t], stub.logits(prefix, 1)[0])


def test_only_the_last_order_tokens_matter():
    stub = StubProvider(order=2)
    assert np.array_equal(stub.logits([1, 2, 3, 4], 1), stub.logits([9, 9, 3, 4], 1))
    assert not np.array_equal(stub.logits([1, 2, 3, 4], 1), stub.logits([1, 2, 9, 4], 1))


def test_the_logits_follow_the_documented_hash():
    digest = hashlib.sha256(b"stub-v1:5:8:1,2").digest()
    expected = np.random.default_rng(int.from_bytes(digest[:8], "big")).standard_normal(8) * 3.0
    noise_digest = hashlib.sha256(b"stub-v1:6:8:1,2").digest()
    noise = np.random.default_rng(int.from_bytes(noise_digest[:8], "big")).standard_normal(8)
    plain = StubProvider(vocab_size=8, seed=5, order=2, sharpness=3.0)
    noisy = StubProvider(vocab_size=8, seed=5, noise_seed=6, noise=0.5, order=2, sharpness=3.0)
    assert np.array_equal(plain.logits([7, 1, 2], 1)[0], expected)
    assert np.array_equal(noisy.logits([7, 1, 2], 1)[0], expected + 0.5 * noise)


def test_its_identity_names_every_parameter_and_hashes_the_revision():
    identity = StubProvider(seed=3, noise_seed=4, noise=0.25, name="draft").identity
    revision = "stub-v1 seed=3 noise_seed=4 noise=0.25 vocab=32 order=4 sharpness=2.0"
    assert identity.as_payload() == {
        "name": "draft",
        "revision": revision,
        "sha256": hashlib.sha256(revision.encode()).hexdigest(),
        "runtime": "pathfinder-stub",
        "runtime_version": ENGINE_VERSION,
        # A stub has no tokenizer, config, template, conversion or file of its own.
        "tokenizer_sha256": "",
        "config_sha256": "",
        "chat_template_sha256": "",
        "converted_sha256": "",
        "source_sha256": "",
        "file_type": "",
    }


def test_next_distributions_warps_the_logits():
    params = GenerationParams(top_k=3)
    probs = StubProvider().next_distributions([1, 2, 3], 2, params)
    assert probs.shape == (2, 32)
    np.testing.assert_allclose(probs.sum(axis=1), 1.0)
    assert ((probs > 0).sum(axis=1) == 3).all()


def test_it_refuses_to_score_more_positions_than_the_context_has():
    with pytest.raises(ValueError, match="num_positions"):
        StubProvider().next_distributions([1, 2], 3, GenerationParams())


def test_noise_needs_a_noise_seed():
    with pytest.raises(ValueError, match="noise_seed"):
        StubProvider(noise=0.5)

"""Checks of the Provider contract that every real provider's tests share."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from decoding.engine import Provider


def greedy_continuation(provider: Provider, prompt: Sequence[int], n: int) -> list[int]:
    """prompt followed by the provider's n argmax tokens, one one-position call each."""
    context = list(prompt)
    for _ in range(n):
        context.append(int(np.argmax(provider.logits(context, 1)[0])))
    return context


def separate_calls(provider: Provider, context: Sequence[int], num_positions: int) -> np.ndarray:
    """What logits(context, num_positions) returns, built from one-position calls in order, as
    plain decoding makes them (each evaluating one new token on top of the cache)."""
    first = len(context) - num_positions + 1
    return np.stack([provider.logits(context[: first + t], 1)[0] for t in range(num_positions)])


def assert_same_decisions(batched: np.ndarray, separate: np.ndarray, tolerance: float) -> None:
    """Rows agree within tolerance, and any argmax that differs is a near-tie, i.e. the top two
    logits lie within the kernels' noise of each other."""
    assert batched.shape == separate.shape
    assert batched.dtype == np.float32
    worst = float(np.abs(batched - separate).max())
    assert worst <= tolerance, f"logits differ by {worst}, more than {tolerance}"
    top_two = np.sort(separate, axis=1)[:, -2:]
    margins = top_two[:, 1] - top_two[:, 0]
    differing = batched.argmax(axis=1) != separate.argmax(axis=1)
    assert (margins[differing] <= 2 * tolerance).all(), f"margins {margins[differing]}"


def assert_cache_reused_and_truncated(
    make: Callable[[], Provider], context: Sequence[int], tolerance: float
) -> None:
    """The provider evaluates only tokens beyond the prefix shared with its previous call (and
    the positions asked for), and after a divergence matches a provider with no history, within
    `tolerance` (0 for a batch-invariant runtime: equal).

    Every call here evaluates at least two tokens, as a fresh provider evaluating the whole
    context does, so a runtime whose one-token kernels differ from its batch kernels passes too.
    """
    provider = make()
    provider.logits(context, 2)
    assert provider.tokens_evaluated == len(context)

    extended = [*context, 5, 6, 7]
    provider.logits(extended, 1)
    assert provider.tokens_evaluated == len(context) + 3  # only the new tokens

    before = provider.tokens_evaluated
    provider.logits(extended, 5)  # all cached: the 5 positions asked for are evaluated again
    assert provider.tokens_evaluated - before == 5

    # A divergent context, as after a rejected draft: keep the common prefix, drop the rest.
    other = (context[-1] + 1) % provider.vocab_size
    divergent = [*context[:-1], other, 8, 9]
    before = provider.tokens_evaluated
    got = provider.logits(divergent, 2)
    assert provider.tokens_evaluated - before == 3
    np.testing.assert_allclose(got, make().logits(divergent, 2), rtol=0, atol=tolerance)

    shorter = context[:-3]  # rolled back behind the divergence
    before = provider.tokens_evaluated
    got = provider.logits(shorter, 2)
    assert provider.tokens_evaluated - before == 2
    np.testing.assert_allclose(got, make().logits(shorter, 2), rtol=0, atol=tolerance)

    prefilled = make()
    prefilled.prefill(context)  # all but the last token, whose logits the first call needs
    assert prefilled.tokens_evaluated == len(context) - 1
    np.testing.assert_allclose(
        prefilled.logits(context, 2), make().logits(context, 2), rtol=0, atol=tolerance
    )
    assert prefilled.tokens_evaluated == len(context) + 1


def assert_greedy_equal_but_near_ties(
    provider: Provider, prompt: Sequence[int], speculative: Sequence[int], tolerance: float
) -> tuple[int, float] | None:
    """speculative (the output of a speculative run) equals the provider's own greedy decoding
    token for token, except that it may part ways at a near-tie: a position where the target's
    top two logits lie within `tolerance` (the batch-vs-one-token kernel noise). Returns None
    when every token agreed, else (position, top-two gap) of the parting."""
    plain = greedy_continuation(provider, prompt, len(speculative))[len(prompt) :]
    for position, (ours, theirs) in enumerate(zip(speculative, plain, strict=True)):
        if ours != theirs:
            logits = provider.logits([*prompt, *plain[:position]], 1)[0]
            top_two = np.sort(logits)[-2:]
            gap = float(top_two[1] - top_two[0])
            assert gap < tolerance, (
                f"position {position}: speculative {ours}, greedy {theirs}, and the target's "
                f"top two logits are {gap:.3f} apart (tolerance {tolerance}): not a near-tie"
            )
            return position, gap
    return None


def assert_two_tokens_distributed_as_target_sampling(
    decoder, target: Provider, prompt: Sequence[int], params: dict, seeds: int, records
) -> None:
    """Speculative sampling's first two tokens over `seeds` seeds follow the target-only law
    p(t1) p(t2 | t1) under the same warping: chi-square at significance 0.001 (cells expecting
    < 5 pooled; the seeds are fixed, so the outcome is deterministic; a biased rule fails by
    orders of magnitude). `records` are the sink's, to show the draft was both right and wrong."""
    from scipy.stats import chisquare

    from decoding.engine import GenerationParams, GenerationRequest
    from tests.chisquare import pool_small_cells

    vocab = target.vocab_size
    counts = np.zeros((vocab, vocab))
    for seed in range(seeds):
        run = GenerationParams(max_tokens=3, draft_length=2, seed=seed, **params)
        output = decoder.generate(GenerationRequest("r", tuple(prompt), run)).output_token_ids
        counts[output[0], output[1]] += 1
    drafted = sum(record.drafted_count for record in records)
    accepted = sum(record.accepted_count for record in records)
    assert 0 < accepted < drafted

    warping = GenerationParams(**params)
    p1 = target.next_distributions(prompt, 1, warping)[0]
    joint = np.stack(
        [p1[t] * target.next_distributions((*prompt, t), 1, warping)[0] for t in range(vocab)]
    )
    expected = seeds * joint.ravel()
    observed = counts.ravel()
    assert observed[expected == 0].sum() == 0  # never a token the warping rules out
    observed, expected = pool_small_cells(observed[expected > 0], expected[expected > 0])
    assert chisquare(observed, expected).pvalue > 0.001

"""The llama.cpp provider's prompt cache on the real model: a second prompt sharing a document
skips its prefill, the restored state gives the logits a fresh evaluation gives, memory stays
within the bound."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

HELDOUT = Path(__file__).resolve().parents[2] / "bench" / "data" / "heldout"
APACHE = "Apache License 2.0\n" + (HELDOUT / "apache-2.0-sections-2-5.txt").read_text()[:1500]
MPL = "Mozilla Public License\n" + (HELDOUT / "mpl-2.0-sections-2-3.txt").read_text()[:1500]
GPL = "GNU General Public License\n" + (HELDOUT / "gpl-3.0.txt").read_text()[:1500]


@pytest.fixture
def cached(make_llama):
    return make_llama(n_ctx=2048, prompt_cache_bytes=64 << 20)


def ask(provider, document: str, question: str) -> tuple[list[int], int]:
    prompt = provider.tokenizer.encode(f"{document}\n\nQuestion: {question}\nAnswer:")
    return prompt, provider.prefill(prompt)


def test_a_question_about_a_document_seen_before_another_skips_the_documents_prefill(cached):
    first, reused = ask(cached, APACHE, "Who grants the license?")
    assert reused == 0
    _, reused = ask(cached, MPL, "What is the effective date?")
    assert reused == 0  # another document: nothing shared
    evaluated = cached.tokens_evaluated
    again, reused = ask(cached, APACHE, "When do patent licenses terminate?")
    shared = next(i for i, (a, b) in enumerate(zip(first, again, strict=False)) if a != b)
    assert reused == shared > 300  # the whole document, restored from the saved state
    assert cached.tokens_evaluated - evaluated == len(again) - 1 - shared  # only the question


def test_logits_after_a_restored_prefix_equal_a_fresh_evaluations(make_llama, cached):
    ask(cached, APACHE, "Who grants the license?")
    ask(cached, MPL, "What is the effective date?")
    prompt, reused = ask(cached, APACHE, "Quote section 3.")
    assert reused > 300
    fresh = make_llama(n_ctx=2048)
    fresh.prefill(prompt)
    np.testing.assert_array_equal(cached.logits(prompt, 1), fresh.logits(prompt, 1))


def test_the_cache_stays_within_its_bytes_evicting_the_least_recently_used(make_llama):
    probe = make_llama(n_ctx=2048, prompt_cache_bytes=64 << 20)
    ask(probe, APACHE, "Summarise.")
    one = probe._prompts.nbytes  # one saved prompt: ~23 kB of keys and values per token
    assert 300 * 20_000 < one < 400 * 30_000
    capacity = int(2.2 * one)  # room for two such prompts, not three
    provider = make_llama(n_ctx=2048, prompt_cache_bytes=capacity)
    for document in (APACHE, MPL, GPL):
        ask(provider, document, "Summarise.")
        assert provider._prompts.nbytes <= capacity
    assert len(provider._prompts) == 2
    _, reused = ask(provider, MPL, "Another question.")
    assert reused > 300  # recent: still there
    _, reused = ask(provider, APACHE, "Another question.")
    assert reused == 0  # the oldest, APACHE, was evicted


def test_without_a_cache_only_the_live_prefix_is_reused(make_llama):
    provider = make_llama(n_ctx=2048)
    ask(provider, APACHE, "One?")
    ask(provider, MPL, "Two?")
    _, reused = ask(provider, APACHE, "Three?")
    assert reused == 0 and provider._prompts is None

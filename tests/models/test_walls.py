"""The walls between matters on the real model (docs/adr/0024): what one matter's prompt left in
a model's live KV cache, in the worker's saved prompts or in a batch slot's stream never serves
another matter's prompt (it is evaluated, counted and so timed as a fresh one), while the same
matter's next question still skips its document's prefill. Each test reads the count a key reads
(`cached_prompt_tokens` is the prefill's return) and the tokens actually evaluated (the time)."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

from decoding.engine import DraftModelDrafter
from decoding.engine.providers.llamacpp_sequences import SequenceEngine

HELDOUT = Path(__file__).resolve().parents[2] / "bench" / "data" / "heldout"
# Matter A's confidential document, and another it also reads.
CONFIDENTIAL = (
    "PRIVILEGED SETTLEMENT MEMORANDUM\n"
    + (HELDOUT / "apache-2.0-sections-2-5.txt").read_text()[:1400]
    + "\nThe parties agree to settle for $3,918,204."
)
OTHER = "Mozilla Public License\n" + (HELDOUT / "mpl-2.0-sections-2-3.txt").read_text()[:1500]
A, B = "matter-a", "matter-b"


def ask(provider, document: str, question: str) -> tuple[list[int], int]:
    prompt = provider.tokenizer.encode(f"{document}\n\nQuestion: {question}\nAnswer:")
    return prompt, provider.prefill(prompt)


def test_another_matter_never_starts_from_the_live_cache_a_matter_left(make_llama):
    provider = make_llama(n_ctx=2048)  # no saved prompts: only the live KV cache
    a, b = provider.walled(A), provider.walled(B)
    ask(a, CONFIDENTIAL, "What is the settlement figure?")
    evaluated = provider.tokens_evaluated
    prompt, reused = ask(b, CONFIDENTIAL, "What is the settlement figure?")
    assert reused == 0
    assert provider.tokens_evaluated - evaluated == len(prompt) - 1  # the whole prompt: timed so
    # The same matter, next: its own document is in the live cache again.
    ask(a, CONFIDENTIAL, "Who signed?")
    _, reused = ask(a, CONFIDENTIAL, "When is payment due?")
    assert reused > 300


def test_another_matter_finds_nothing_in_the_saved_prompts_while_the_matter_finds_its_own(
    make_llama,
):
    provider = make_llama(n_ctx=2048, prompt_cache_bytes=64 << 20)
    a, b = provider.walled(A), provider.walled(B)
    first, _ = ask(a, CONFIDENTIAL, "What is the settlement figure?")
    ask(a, OTHER, "What is the effective date?")  # the live cache moves on; the save stays
    evaluated = provider.tokens_evaluated
    prompt, reused = ask(b, CONFIDENTIAL, "What is the settlement figure?")
    assert reused == 0 and provider.tokens_evaluated - evaluated == len(prompt) - 1
    again, reused = ask(a, CONFIDENTIAL, "Who signed?")
    shared = next(i for i, (x, y) in enumerate(zip(first, again, strict=False)) if x != y)
    assert reused == shared > 300  # matter A's question still skips its document's prefill


def test_the_walls_keep_exactness_logits_after_another_matters_turn_equal_a_fresh_one(
    make_llama,
):
    provider = make_llama(n_ctx=2048, prompt_cache_bytes=64 << 20)
    ask(provider.walled(A), CONFIDENTIAL, "What is the settlement figure?")
    b = provider.walled(B)
    prompt, _ = ask(b, CONFIDENTIAL, "Who signed?")
    fresh = make_llama(n_ctx=2048)
    fresh.prefill(prompt)
    np.testing.assert_array_equal(b.logits(prompt, 1), fresh.logits(prompt, 1))


@pytest.fixture
def engine(make_llama):
    def make(prompt_cache_bytes: int, sequences: int = 2) -> SequenceEngine:
        base = make_llama(n_ctx=2048, prompt_cache_bytes=prompt_cache_bytes)
        engines.append(SequenceEngine(base, sequences=sequences))
        return engines[-1]

    engines: list[SequenceEngine] = []
    yield make
    for made in engines:
        made.close()


@pytest.mark.parametrize("prompt_cache_bytes", [0, 64 << 20], ids=["slot reuse", "saved prompts"])
def test_a_batch_slot_another_matter_used_starts_empty(engine, prompt_cache_bytes):
    """One job after another takes the lowest free slot, whose stream holds the last job's
    tokens: with the prompt cache off that stream was the whole of the attacker's oracle."""
    batch = engine(prompt_cache_bytes)
    with batch.open(wall=A) as a:
        ask(a, CONFIDENTIAL, "What is the settlement figure?")
    with batch.open(wall=B) as b:
        passes = batch.positions
        prompt, reused = ask(b, CONFIDENTIAL, "What is the settlement figure?")
        assert reused == 0 and batch.positions - passes >= len(prompt) - 1
    with batch.open(wall=A) as a:
        ask(a, CONFIDENTIAL, "Who signed?")
    with batch.open(wall=A) as a:
        _, reused = ask(a, CONFIDENTIAL, "When is payment due?")
        assert reused > 300  # the matter's own slot (or saved prompt) still serves it


def test_the_walls_keep_exactness_a_slots_logits_after_another_matter_equal_a_fresh_one(
    engine, make_llama
):
    batch = engine(64 << 20)
    with batch.open(wall=A) as a:
        ask(a, CONFIDENTIAL, "What is the settlement figure?")
    with batch.open(wall=B) as b:
        prompt, _ = ask(b, CONFIDENTIAL, "Who signed?")
        walled = b.logits(prompt, 3)
    fresh = make_llama(n_ctx=2048)
    fresh.prefill(prompt)
    np.testing.assert_array_equal(walled, fresh.logits(prompt, 3))


@pytest.mark.parametrize("neighbours", [B, A], ids=["another matter's", "its own matter's"])
def test_a_finished_jobs_cells_never_lengthen_another_matters_passes(engine, neighbours):
    """A pass pads every slot between its lowest and highest, and attention runs over the
    longest stream in it: matter A's finished prompt left in slot 1 would time the passes of
    matter B's jobs in slots 0 and 2. It is emptied; beside A's own jobs it stays, for A."""
    batch = engine(0, sequences=3)
    low, middle, high = batch.open(wall=neighbours), batch.open(wall=A), batch.open(wall=neighbours)
    ask(middle, CONFIDENTIAL, "What is the settlement figure?")
    middle.close()
    assert len(batch._slots[1].cached) > 300
    context = low.tokenizer.encode("Good morning. Please")
    threads = [
        threading.Thread(target=sequence.logits, args=(context, 1)) for sequence in (low, high)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    low.close()
    high.close()
    left = len(batch._slots[1].cached)
    assert left == 0 if neighbours == B else left > 300


def test_a_draft_models_live_cache_is_walled(make_llama):
    """A draft model's provider is shared by every job of the worker, in turns."""
    draft = make_llama(n_ctx=2048)
    drafter = DraftModelDrafter(draft)
    prompt = draft.tokenizer.encode(CONFIDENTIAL)
    drafter.walled(A).prefill(prompt)
    evaluated = draft.tokens_evaluated
    drafter.walled(B).prefill(prompt)
    assert draft.tokens_evaluated - evaluated == len(prompt) - 1  # the whole prompt again
    evaluated = draft.tokens_evaluated
    drafter.walled(B).prefill(prompt)
    assert draft.tokens_evaluated == evaluated  # its own, kept


def test_a_transformers_models_live_cache_is_walled(tiny_models):
    from decoding.engine.providers.transformers_hf import TransformersProvider

    provider = TransformersProvider(tiny_models["tiny4"], name="tiny4")
    context = provider.tokenizer.encode("the big red dog sat on the mat and the cat ran home")
    assert provider.walled(A).prefill(context) == 0
    evaluated = provider.tokens_evaluated
    assert provider.walled(B).prefill(context) == 0
    assert provider.tokens_evaluated - evaluated == len(context) - 1
    assert provider.walled(B).prefill(context) == len(context) - 1  # its own, kept

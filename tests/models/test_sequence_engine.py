"""Continuous batching on the real model (issue 21 items 1 and 4): jobs decoded together by one
SequenceEngine, each in its own thread, make the records they make alone, byte for byte but the
timings, whoever their neighbours are and however full the batch is.

The jobs are the held-out prompts (bench/data/heldout: legal documents with questions, and open
text), greedy and sampled. Each batched job is replayed alone, on the examiner's configuration (a
LlamaCppProvider: one sequence, llama-cpp-python's default context), under the draft lengths its
records state, as `manage.py replay` does.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from decoding.engine import (
    FixedSchedule,
    GenerationParams,
    GenerationRequest,
    MatchSchedule,
    PromptLookupDrafter,
    ReplaySchedule,
    SpeculativeDecoder,
)
from decoding.engine.providers.base import ALONE, Neighbours
from decoding.engine.providers.llamacpp_sequences import PREFILL_CHUNK, SequenceEngine

from .conftest import ListSink

HELDOUT = Path(__file__).resolve().parents[2] / "bench" / "data" / "heldout"
N_CTX = 2048
MAX_TOKENS = 40


def chatml(user: str, system: str | None = None) -> str:
    turns = [("system", system)] if system else []
    turns.append(("user", user))
    text = "".join(f"<|im_start|>{role}\n{content}<|im_end|>\n" for role, content in turns)
    return text + "<|im_start|>assistant\n"


def held_out_prompts(tokenizer) -> list[list[int]]:
    """Questions about the held-out documents (each document cut to its first 1,500 characters,
    so sixteen fit in memory) interleaved with the open-text prompts."""
    data = json.loads((HELDOUT / "prompts.json").read_text())
    documents = {k: (HELDOUT / v).read_text()[:1500] for k, v in data["documents"].items()}
    asked = [
        chatml(f"{documents[item['document']]}\n\n{item['question']}", data["system"])
        for item in [*data["extraction"], *data["summary"]]
    ]
    texts = [text for pair in zip(asked, data["open"], strict=False) for text in pair]
    texts += asked[len(data["open"]) :] + data["open"][len(asked) :]
    return [tokenizer.encode(text, add_special=False) for text in texts]


@pytest.fixture(scope="module")
def base(make_llama, served_gguf):
    return make_llama(path=served_gguf, n_ctx=N_CTX)


@pytest.fixture(scope="module")
def jobs(base) -> list[GenerationRequest]:
    """Sixteen jobs: every held-out prompt, greedy and sampled in turn, as many times as needed."""
    prompts = held_out_prompts(base.tokenizer)
    requests = []
    for i in range(16):
        sampled = i % 2 == 1
        params = GenerationParams(
            max_tokens=MAX_TOKENS,
            temperature=0.8 if sampled else 0.0,
            seed=1000 + i,
            draft_length=6,
            eos_token_id=base.tokenizer.eos_token_id,
        )
        requests.append(GenerationRequest(f"job-{i}", tuple(prompts[i % len(prompts)]), params))
    return requests


def decode(provider, request: GenerationRequest, schedule) -> tuple[list[dict], object]:
    sink = ListSink()
    drafter = PromptLookupDrafter(provider.vocab_size)
    decoder = SpeculativeDecoder(drafter, provider, sink, tokenizer=provider.tokenizer)
    result = decoder.generate(request, schedule=schedule)
    return [_without_timings(record.payload()) for record in sink.records], result


def _without_timings(payload: dict) -> dict:
    return {key: value for key, value in payload.items() if key != "timings_us"}


def decode_together(
    engine: SequenceEngine, requests, schedule=lambda sequence: FixedSchedule(6)
) -> list[tuple[list[dict], object]]:
    """Every request in a thread of its own on one engine, all started at once, each with
    schedule(its sequence)."""
    results: list = [None] * len(requests)
    errors: list[BaseException] = []
    start = threading.Barrier(len(requests))

    def job(i: int) -> None:
        try:
            start.wait()
            with engine.open(timeout=60) as sequence:
                results[i] = decode(sequence, requests[i], schedule(sequence))
        except BaseException as exc:  # reported by the test below
            errors.append(exc)

    threads = [threading.Thread(target=job, args=(i,)) for i in range(len(requests))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=600)
    assert not errors, errors
    return results


def replay_alone(base, request: GenerationRequest, records: list[dict]) -> list[dict]:
    schedule = ReplaySchedule([record["draft_length"] for record in records])
    return decode(base, request, schedule)[0]


def assert_same_records(batched: list[dict], alone: list[dict], request_id: str) -> None:
    assert len(batched) == len(alone), f"{request_id}: {len(batched)} steps, {len(alone)} alone"
    for step, (got, want) in enumerate(zip(batched, alone, strict=True)):
        differing = sorted(key for key in {*got, *want} if got.get(key) != want.get(key))
        assert not differing, f"{request_id} step {step}: {differing} differ"


def all_at_once(*calls) -> None:
    """Each call in a thread of its own, started together; waits for all."""
    threads = [threading.Thread(target=call) for call in calls]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)


def ask_together(engine: SequenceEngine, prompts: list[list[int]]) -> tuple[dict, dict]:
    """Every prompt prefilled on a slot of its own, all reaching one gathered step, then its
    next-token logits: (tokens each prefill reused, logits), by prompt index."""
    reused, got = {}, {}
    start = threading.Barrier(len(prompts))

    def ask(i: int) -> None:
        with engine.open() as sequence:
            start.wait()
            reused[i] = sequence.prefill(prompts[i])
            got[i] = sequence.logits(prompts[i], 1)

    try:
        all_at_once(*(lambda i=i: ask(i) for i in range(len(prompts))))
    finally:
        engine.close()
    return reused, got


@pytest.mark.parametrize(("size", "first"), [(2, 0), (8, 3), (16, 5)])
def test_jobs_decoded_in_a_batch_make_the_records_they_make_alone(base, jobs, size, first):
    # A different window of the jobs each time, so a job meets different neighbours.
    requests = [jobs[(first + i) % len(jobs)] for i in range(size)]
    engine = SequenceEngine(base, sequences=size)
    try:
        batched = decode_together(engine, requests)
        passes = engine.passes
    finally:
        engine.close()

    steps = sum(result.steps for _, result in batched)
    assert passes < steps, f"{passes} passes for {steps} steps: the jobs never shared a pass"
    for request, (records, result) in zip(requests, batched, strict=True):
        assert result.output_token_ids
        assert_same_records(records, replay_alone(base, request, records), request.request_id)


def test_a_sequence_gets_the_logits_of_the_examiners_context_bit_for_bit(base, jobs):
    """Logits of prompt ends and verify batches, with and without neighbours in the pass."""
    prompt = list(jobs[0].prompt_token_ids)
    tail = [int(t) for t in np.random.default_rng(7).integers(100, 20000, size=9)]
    want = base.logits([*prompt, *tail], 10)
    engine = SequenceEngine(base, sequences=3)
    try:
        with engine.open() as alone:
            alone.prefill(prompt)
            assert np.array_equal(alone.logits([*prompt, *tail], 10), want)
        neighbours = [list(jobs[i].prompt_token_ids) for i in (1, 2)]
        got = {}

        def run(i: int, context: list[int], positions: int) -> None:
            with engine.open() as sequence:
                sequence.prefill(context[:-positions])
                got[i] = sequence.logits(context, positions)

        all_at_once(
            lambda: run(0, [*prompt, *tail], 10),
            *(
                lambda i=i, n=n: run(i + 1, [*n, *tail[: 2 * i + 1]], 2 * i + 1)
                for i, n in enumerate(neighbours)
            ),
        )
    finally:
        engine.close()
    assert np.array_equal(got[0], want)
    for i, n in enumerate(neighbours):
        context = [*n, *tail[: 2 * i + 1]]
        assert np.array_equal(got[i + 1], base.logits(context, 2 * i + 1))


# A verify-cost curve of the batch-invariant build (ms; bench/results/heldout-2026-12-03.md).
CURVE = {1: 8.99, 2: 11.7, 4: 12.22, 8: 15.81, 16: 22.06}


def test_draft_lengths_chosen_for_the_whole_pass_replay_alone_identical(base, jobs):
    """The worker's schedule in a batch prices each step as the pass it shares (issue 21 item
    3): what it chose depends on the neighbours, so a replay takes the recorded lengths."""
    requests = [jobs[(7 + i) % len(jobs)] for i in range(8)]
    engine = SequenceEngine(base, sequences=8)
    try:
        batched = decode_together(
            engine,
            requests,
            lambda sequence: MatchSchedule(16, CURVE, neighbours=sequence.neighbours),
        )
    finally:
        engine.close()
    for request, (records, _) in zip(requests, batched, strict=True):
        assert_same_records(records, replay_alone(base, request, records), request.request_id)


def test_a_slot_is_told_how_many_slots_the_last_pass_padded_it_with(base, jobs):
    engine = SequenceEngine(base, sequences=3, gather_s=30)  # a pass waits for both requests
    first, second = (list(job.prompt_token_ids)[:20] for job in jobs[:2])

    def together(*calls) -> None:
        threads = [threading.Thread(target=call, args=args) for call, *args in calls]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)

    try:
        with engine.open() as a, engine.open() as b:
            assert a.neighbours() == b.neighbours() == ALONE  # no pass yet
            together((a.prefill, first), (b.prefill, second))
            # a verifies 4 drafted tokens (5 positions) while b decodes one: one pass.
            together((a.logits, [*first, *first[:4]], 5), (b.logits, second, 1))
            assert engine.passes == 2
            assert a.neighbours() == b.neighbours() == Neighbours(1)
            # A third slot would join the range: padded beside both.
            assert engine.neighbours(engine._slots[2]) == Neighbours(2)
        with engine.open() as alone:
            assert alone.logits(first, 1).shape == (1, base.vocab_size)
            assert alone.neighbours() == ALONE
    finally:
        engine.close()


def greedy_steps(sequence, context: list[int], steps: int) -> list[int]:
    """`steps` one-token logits calls, each taking the argmax: the context they made."""
    context = list(context)
    for _ in range(steps):
        context.append(int(sequence.logits(context, 1)[0].argmax()))
    return context


def test_a_background_sequence_waits_while_an_interactive_one_decodes(base, jobs):
    """A batch line's request is held out of every pass while an interactive sequence is open
    (within BACKGROUND_WAIT_S), so the interactive one decodes in passes of its own; the line
    steps once it closes, with the logits it gets alone."""
    line_prompt, call_prompt = (list(job.prompt_token_ids)[:30] for job in jobs[:2])
    engine = SequenceEngine(base, sequences=2, background_wait_s=60)
    carried: list[int] = []
    engine.on_pass = lambda sequences, positions, seconds: carried.append(sequences)
    got = {}
    try:
        with engine.open(background=True) as line:
            line.prefill(line_prompt)
            with engine.open() as call:
                call.prefill(call_prompt)
                waiting = threading.Thread(
                    target=lambda: got.setdefault("line", line.logits(line_prompt, 1))
                )
                carried.clear()
                waiting.start()
                context = greedy_steps(call, call_prompt, 6)
                assert "line" not in got and waiting.is_alive()
            waiting.join(timeout=60)
    finally:
        engine.close()
    assert carried[:6] == [1] * 6  # the interactive call's six passes, each alone
    assert np.array_equal(got["line"], base.logits(line_prompt, 1))
    assert context == greedy_steps(base, call_prompt, 6)


def test_a_held_background_request_steps_once_it_has_waited_the_bound(base, jobs):
    """Under steady interactive load a line still steps, about once per BACKGROUND_WAIT_S:
    its lease is renewed only while it steps."""
    line_prompt, call_prompt = (list(job.prompt_token_ids)[:30] for job in jobs[:2])
    engine = SequenceEngine(base, sequences=2, background_wait_s=0.3)
    got = {}
    try:
        with engine.open(background=True) as line, engine.open() as call:
            line.prefill(line_prompt)
            call.prefill(call_prompt)
            waiting = threading.Thread(
                target=lambda: got.setdefault("line", line.logits(line_prompt, 1))
            )
            started = time.monotonic()
            waiting.start()
            context = list(call_prompt)
            while "line" not in got and time.monotonic() - started < 30:
                context = greedy_steps(call, context, 1)
            waited = time.monotonic() - started
    finally:
        engine.close()
    assert "line" in got, "the line never stepped beside a busy interactive sequence"
    assert 0.3 <= waited < 5, waited
    assert np.array_equal(got["line"], base.logits(line_prompt, 1))


def test_a_long_prompt_is_taken_in_chunks_while_the_others_decode(base, jobs):
    """A prompt of several chunks arriving mid-decode: the sequence already decoding keeps
    stepping between its chunks, and both get their own logits."""
    short = list(jobs[1].prompt_token_ids)[:40]
    long = (list(jobs[0].prompt_token_ids) * 3)[: 3 * PREFILL_CHUNK + 10]
    engine = SequenceEngine(base, sequences=2)
    try:
        with engine.open() as decoding, engine.open() as arriving:
            decoding.prefill(short)
            prefilled = threading.Event()

            def prefill_long() -> None:
                arriving.prefill(long)
                prefilled.set()

            thread = threading.Thread(target=prefill_long)
            context, rows = list(short), []
            thread.start()
            while not prefilled.is_set() and len(context) < N_CTX - 1:
                rows.append(decoding.logits(context, 1)[0])
                context.append(int(rows[-1].argmax()))
            thread.join(timeout=120)
            last = arriving.logits(long, 1)
    finally:
        engine.close()
    assert len(rows) >= 2, "the decoding sequence waited for the whole prompt"
    assert np.array_equal(last, base.logits(long, 1))
    for i, row in enumerate(rows):
        assert np.array_equal(row, base.logits(context[: len(short) + i], 1)[0]), i


def test_a_slots_next_job_reuses_the_prompt_prefix_its_stream_holds(base, jobs):
    prompt = list(jobs[0].prompt_token_ids)
    engine = SequenceEngine(base, sequences=1)
    try:
        with engine.open() as first:
            assert first.prefill(prompt) == 0
        question = [*prompt[:-5], *base.tokenizer.encode(" Who signs?", add_special=False)]
        with engine.open() as second:
            assert second.prefill(question) == len(prompt) - 5
            got = second.logits(question, 1)
    finally:
        engine.close()
    assert np.array_equal(got, base.logits(question, 1))


def test_a_bad_token_fails_its_own_sequence_only(base, jobs):
    engine = SequenceEngine(base, sequences=2)
    try:
        with engine.open() as good, engine.open() as bad:
            with pytest.raises(ValueError, match="token ids"):
                bad.logits([1, 2, base.vocab_size], 1)
            context = list(jobs[2].prompt_token_ids)
            assert np.array_equal(good.logits(context, 2), base.logits(context, 2))
    finally:
        engine.close()


def test_open_waits_for_a_free_slot(base):
    engine = SequenceEngine(base, sequences=1)
    try:
        held = engine.open()
        with pytest.raises(TimeoutError):
            engine.open(timeout=0.2)
        threading.Timer(0.2, held.close).start()
        engine.open(timeout=5).close()
    finally:
        engine.close()


def test_the_prompt_cache_serves_every_slot(make_llama, served_gguf, jobs):
    """A second question about a document, on another slot while the first job still holds its
    own: its prefill restores the first prompt's saved state and evaluates only the rest."""
    base = make_llama(path=served_gguf, n_ctx=N_CTX, prompt_cache_bytes=256 << 20)
    document = list(jobs[0].prompt_token_ids)[:-8]
    first = [*document, *base.tokenizer.encode(" Who may terminate it?", add_special=False)]
    second = [*document, *base.tokenizer.encode(" Which law governs it?", add_special=False)]
    engine = SequenceEngine(base, sequences=2)
    try:
        with engine.open() as one, engine.open() as two:
            assert one.prefill(first) == 0
            assert two.prefill(second) == len(document)
            got = two.logits(second, 1)
    finally:
        engine.close()
    assert np.array_equal(got, make_llama(path=served_gguf, n_ctx=N_CTX).logits(second, 1))


def test_a_restore_into_a_slot_another_prompt_shares_leaves_that_prompt_its_cells(
    make_llama, served_gguf, jobs
):
    """Written after a throughput run in which batched jobs replayed wrong: in one step, a prompt
    whose prefix another slot holds, and a new job on that slot whose prompt the cache holds.
    When the first copied the slot's cells (llama.cpp applies a copy at the next pass) and the
    second restored into the slot at once, the first got the second's cells; 'r1 False' before
    the fix. Both now get the examiner's logits."""
    base = make_llama(path=served_gguf, n_ctx=N_CTX, prompt_cache_bytes=256 << 20)
    a, b, other = (list(jobs[i].prompt_token_ids) for i in (0, 4, 1))
    question = base.tokenizer.encode(" Answer briefly.", add_special=False)
    engine = SequenceEngine(base, sequences=3, gather_s=0.5)
    try:
        with engine.open() as first, engine.open() as second:
            first.prefill(a)  # slot 0 holds a
            second.prefill(b)  # the cache holds b
            second.prefill(other)  # slot 1 no longer does
        got = {}
        start = threading.Barrier(2)
        with engine.open() as zero, engine.open(), engine.open() as two:

            def on(sequence, context, delay):
                start.wait()
                time.sleep(delay)  # both within one gathered step, in this order
                sequence.prefill(context)
                got[id(sequence)] = sequence.logits(context, 1)

            threads = [
                threading.Thread(target=on, args=(two, [*a, *question], 0.0)),
                threading.Thread(target=on, args=(zero, [*b, *question], 0.1)),
            ]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(timeout=120)
            assert np.array_equal(got[id(two)], base.logits([*a, *question], 1))
            assert np.array_equal(got[id(zero)], base.logits([*b, *question], 1))
    finally:
        engine.close()


def test_questions_sent_together_about_one_document_evaluate_it_once(make_llama, served_gguf, jobs):
    """Four questions about one document reach the engine in one gathered step (a legal team's
    batch). The first evaluates the document; the others wait for its saved state, restore it
    and evaluate only their question. Each still gets the examiner's logits. Begun together, as
    before, every one of them evaluated the whole document."""
    base = make_llama(path=served_gguf, n_ctx=N_CTX, prompt_cache_bytes=256 << 20)
    document = list(jobs[0].prompt_token_ids)[:-8]
    questions = [" Who may end it?", " Which law governs it?", " When is it due?", " Who pays?"]
    prompts = [[*document, *base.tokenizer.encode(q, add_special=False)] for q in questions]
    engine = SequenceEngine(base, sequences=4, gather_s=1.0)
    reused, got = ask_together(engine, prompts)
    assert sorted(reused.values())[0] == 0
    assert all(n >= len(document) for n in sorted(reused.values())[1:]), reused
    assert engine.positions < 2 * len(document), engine.positions
    examiner = make_llama(path=served_gguf, n_ctx=N_CTX)
    for i, prompt in enumerate(prompts):
        assert np.array_equal(got[i], examiner.logits(prompt, 1)), i


def test_prompts_sharing_less_than_a_step_do_not_wait_for_each_other(make_llama, served_gguf, jobs):
    """Two texts under one short instruction share only a few tokens: neither waits for the
    other's saved state (a restore would save less than a step), and both are right."""
    base = make_llama(path=served_gguf, n_ctx=N_CTX, prompt_cache_bytes=256 << 20)
    instruction = base.tokenizer.encode("Summarise:", add_special=False)
    prompts = [[*instruction, *jobs[i].prompt_token_ids] for i in (1, 3)]  # two open texts
    reused, got = ask_together(SequenceEngine(base, sequences=2, gather_s=1.0), prompts)
    assert reused == {0: 0, 1: 0}
    examiner = make_llama(path=served_gguf, n_ctx=N_CTX)
    for i, prompt in enumerate(prompts):
        assert np.array_equal(got[i], examiner.logits(prompt, 1)), i

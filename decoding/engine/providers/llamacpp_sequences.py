"""Many sequences decoded together by one llama.cpp context: a worker's sequence engine
(what serving systems call continuous batching; here "batch" means the Batch API alone).

One forward pass reads every weight once however many positions it carries, so the verify
positions of several jobs cost little more together than one job's alone. The engine owns a
second context on the loaded model with one KV stream per sequence slot (llama.cpp's kv_unified
off): a sequence's cells start at cell 0 of its own stream in position order, exactly where a
context holding it alone puts them, so with the batch-invariant kernels (patches/llama.cpp) a
position's logits are bit for bit what the sequence alone gets, whoever shares the pass
(tests/models/test_sequence_engine.py).

Each job's decoder runs in its own thread and sees a `SequenceProvider`; its model calls become
requests the engine thread gathers into steps. llama.cpp computes one pass over streams only when
each sequence brings the same number of tokens and their slots are consecutive, else it splits
the batch into several passes; a step therefore pads every slot in its range to the longest
request with filler tokens whose logits nobody reads and whose cells are removed at once.
Prompts longer than a step's positions are evaluated in chunks of their own, one chunk between
steps, so a new long prompt does not stall the sequences already decoding. Prompts share their
prefixes through the worker's prompt cache: one that arrives with another sharing its document
waits for that one's saved state instead of evaluating the document again.

Sharing stops at the wall a sequence is opened behind (its job's matter, docs/adr/0024): a slot
whose stream holds another wall's tokens is emptied before its new job's first evaluation, a
prompt restores only its own wall's saved states, and waits only for its own wall's prompts.
Streams are apart (kv_unified off), so a pass shares compute and time, never cells; and a
finished job's cells left in a slot never lengthen, and so time, a pass that carries another
wall's sequences (attention runs over the longest stream in the pass).
"""

from __future__ import annotations

import ctypes
import threading
import time
import weakref
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field

import llama_cpp
import numpy as np

from .base import ALONE, NO_WALL, Neighbours, Provider, common_prefix
from .llamacpp import LlamaCppProvider, logits_rows, restore_prompt, save_prompt
from .model_thread import MODEL_THREAD

# Tokens a request may bring to a step; a longer evaluation (a prompt, a lost cache) goes in
# chunks of its own first. Above any draft length a schedule asks for (at most 16 + 1).
STEP_POSITIONS = 32
# A long evaluation goes in chunks of at most this many tokens, one between two steps.
PREFILL_CHUNK = 256
# A step waits for every open sequence to send its next request, at most this long or as long
# as the last step's pass took, whichever is longer. A sequence left out waits a whole pass, and
# an idle slot inside the pass's range is padded anyway, so waiting up to a pass costs the others
# no more than leaving it out would. With a fixed 20 ms, passes of 16 open sequences carried 9.1
# of them on average (11.0 with this wait; in-process, 2026-12-03).
GATHER_S = 0.02
# While an interactive sequence is open, a background one's request (a batch line's) waits up to
# this long for a pass without it: on a compute-bound worker every sequence in a pass slows the
# others, and a line has hours where a caller waits seconds. The bound keeps a line stepping
# (its lease, PATHFINDER_JOB_LEASE_S, is renewed only while it steps) under steady interactive
# load; 2 s is about the longest a 32-token interactive call takes alone here
# (bench/results/batch-beside-2026-12-06.md).
BACKGROUND_WAIT_S = 2.0


class EngineClosed(RuntimeError):
    """The engine stopped (its worker is shutting down, or a pass failed past repair)."""


@dataclass
class _Slot:
    index: int
    cached: list[int] = field(default_factory=list)  # the tokens its stream holds, in order
    held_wall: Hashable = NO_WALL  # whose job put them there
    wall: Hashable = NO_WALL  # the open job's
    open: bool = False
    background: bool = False  # its job yields passes to interactive ones (BACKGROUND_WAIT_S)


@dataclass(eq=False)  # one request is one call: compared and hashed as itself
class _Request:
    slot: _Slot
    tokens: list[int]
    outputs: int  # logits wanted for the last `outputs` positions of tokens
    start: int = -1  # first position not yet evaluated (-1: not yet looked at)
    rows: list[np.ndarray] = field(default_factory=list)  # (k, vocab) blocks, one per pass
    reused: int = 0  # leading tokens found in the slot's stream
    error: BaseException | None = None
    done: threading.Event = field(default_factory=threading.Event)
    submitted: float = field(default_factory=time.monotonic)

    @property
    def first_output(self) -> int:
        return len(self.tokens) - self.outputs

    @property
    def remaining(self) -> int:
        return len(self.tokens) - self.start


class SequenceEngine:
    """Decodes up to `sequences` sequences of one loaded llama.cpp model together.

    `open()` hands a job a SequenceProvider bound to a free slot (blocking while none is); its
    `close()` frees the slot. A slot's stream keeps the last job's tokens, so a job whose prompt
    shares a prefix with its slot's previous job of the same wall evaluates only the rest.
    """

    def __init__(
        self,
        base: LlamaCppProvider,
        *,
        sequences: int,
        step_positions: int = STEP_POSITIONS,
        gather_s: float = GATHER_S,
        background_wait_s: float = BACKGROUND_WAIT_S,
    ) -> None:
        if sequences < 1:
            raise ValueError(f"sequences must be at least 1, got {sequences}")
        self.base = base
        self._step_positions = step_positions
        self._gather_s = gather_s
        self._background_wait_s = background_wait_s
        self._n_ctx = base.n_ctx
        # Each stream holds a whole context plus a step's filler, in whole blocks of 256 cells
        # (llama.cpp's padding: any other size is rounded down, dropping cells).
        params = llama_cpp.llama_context_params()
        size = ctypes.sizeof(params)
        ctypes.memmove(ctypes.byref(params), ctypes.byref(base.context_params), size)
        params.n_seq_max = sequences
        params.kv_unified = False
        params.n_ctx = sequences * -(-(self._n_ctx + step_positions) // 256) * 256
        params.n_batch = params.n_ubatch = max(PREFILL_CHUNK, sequences * step_positions)
        self._ctx = llama_cpp.llama_init_from_model(base.model, params)
        if not self._ctx:
            raise RuntimeError(f"llama.cpp could not make a context for {sequences} sequences")
        self._memory = llama_cpp.llama_get_memory(self._ctx)
        self._prompts = base.prompt_cache  # shared with the base's own prefills
        self._batch = llama_cpp.llama_batch_init(params.n_batch, 0, 1)
        self._slots = [_Slot(i) for i in range(sequences)]
        self._pending: list[_Request] = []
        self._lock = threading.Condition()
        self._closed = False
        self._retiring = False
        # The last step's pass: its lowest and highest slot, and the slots with a request in it.
        self._last_pass: tuple[int, int, set[int]] = (0, 0, set())
        self._last_pass_s = 0.0  # how long it took
        self.passes = 0  # llama_decode calls, for tests and metrics
        self.positions = 0  # positions those passes carried, filler included
        # Told of each pass: (sequences with positions in it, positions, seconds).
        self.on_pass: Callable[[int, int, float], None] | None = None
        self._thread = threading.Thread(target=self._run, name="sequence-engine", daemon=True)
        self._thread.start()
        weakref.finalize(self, _free, self._ctx, self._batch)

    # -- the job threads' side ------------------------------------------------------------------

    def open(
        self,
        timeout: float | None = None,
        *,
        wall: Hashable = NO_WALL,
        background: bool = False,
    ) -> SequenceProvider:
        """A provider bound to a free slot: the lowest, so busy slots stay consecutive; it
        starts from no state another wall's job left. A background sequence (a batch line)
        steps only in passes no interactive one is waiting for, or once its request has waited
        BACKGROUND_WAIT_S."""
        with self._lock:
            if not self._lock.wait_for(
                lambda: self._closed or any(not s.open for s in self._slots), timeout
            ):
                raise TimeoutError("no free sequence slot")
            if self._closed:
                raise EngineClosed("the sequence engine is closed")
            slot = next(s for s in self._slots if not s.open)
            slot.open, slot.wall, slot.background = True, wall, background
        return SequenceProvider(self, slot)

    def release(self, slot: _Slot) -> None:
        with self._lock:
            slot.open = False
            self._lock.notify_all()
            last = self._retiring and not any(s.open for s in self._slots)
        if last:
            self.close()

    def retire(self) -> None:
        """Close once the last open sequence is released (its worker has loaded another model)."""
        with self._lock:
            self._retiring = True
            idle = not any(s.open for s in self._slots)
        if idle:
            self.close()

    def submit(self, slot: _Slot, tokens: list[int], outputs: int) -> _Request:
        if len(tokens) > self._n_ctx:
            raise ValueError(f"context of {len(tokens)} tokens exceeds n_ctx {self._n_ctx}")
        if not 0 <= outputs <= len(tokens):
            raise ValueError(f"{outputs} positions asked of a context of {len(tokens)} tokens")
        vocab = self.base.vocab_size
        if any(not 0 <= token < vocab for token in tokens):
            # llama.cpp aborts the whole process on an out-of-range token: refuse it here.
            raise ValueError(f"token ids must be in 0..{vocab - 1}")
        request = _Request(slot, tokens, outputs)
        with self._lock:
            if self._closed:
                raise EngineClosed("the sequence engine is closed")
            self._pending.append(request)
            self._lock.notify_all()
        request.done.wait()
        if request.error is not None:
            raise request.error
        return request

    def neighbours(self, slot: _Slot) -> Neighbours:
        """What the slot's next step would share, as the last step's pass had it: the slots
        padded alongside, from the lowest to the highest (this one joining the range)."""
        low, high, working = self._last_pass
        if not working - {slot.index}:
            return ALONE
        return Neighbours(max(high, slot.index) - min(low, slot.index))

    def forget_wall(self, wall: Hashable) -> None:
        """Drop what `wall`'s jobs left: the saved prompts, the cells of the idle slots its
        jobs held, and, when no slot is open, every cell zeroed (llama.cpp frees one stream's
        cells without overwriting them)."""
        MODEL_THREAD.run(self._forget_wall, wall)

    def _forget_wall(self, wall: Hashable) -> None:
        with self._lock:
            if self._prompts is not None:
                self._prompts.forget(wall)
            for slot in self._slots:
                if not slot.open and slot.held_wall == wall:
                    self._empty(slot)
                    slot.held_wall = NO_WALL
            if not any(slot.open for slot in self._slots):
                llama_cpp.llama_memory_clear(self._memory, True)
                for slot in self._slots:
                    slot.cached.clear()
                    slot.held_wall = NO_WALL

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._lock.notify_all()
        self._thread.join()

    # -- the engine thread ----------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._lock:
                while not self._closed and not self._steppable():
                    self._lock.wait(self._next_due())
                if self._closed:
                    for request in self._pending:
                        _finish(request, EngineClosed("the sequence engine is closed"))
                    return
                # Gather: every stepping sequence's next request, or what came meanwhile.
                deadline = time.monotonic() + max(self._gather_s, self._last_pass_s)
                self._lock.wait_for(self._gathered, max(0.0, deadline - time.monotonic()))
                work = self._steppable()
            try:
                finished = MODEL_THREAD.run(self._step, work)
            except Exception as exc:  # a failed pass fails its requests, never the engine
                self._forget(work)
                finished = [(request, exc) for request in work]
            with self._lock:
                for request, error in finished:
                    self._pending.remove(request)
                    _finish(request, error)

    def _stepping(self) -> list[_Slot]:
        """The open slots a step is for: the interactive ones while any is open, else all."""
        open_slots = [s for s in self._slots if s.open]
        return [s for s in open_slots if not s.background] or open_slots

    def _steppable(self) -> list[_Request]:
        """The pending requests the next step may carry: a background one only while no
        interactive sequence is open, or once it has waited BACKGROUND_WAIT_S."""
        stepping = {s.index for s in self._stepping()}
        overdue = time.monotonic() - self._background_wait_s
        return [r for r in self._pending if r.slot.index in stepping or r.submitted <= overdue]

    def _gathered(self) -> bool:
        waiting = {r.slot.index for r in self._pending}
        return all(s.index in waiting for s in self._stepping())

    def _next_due(self) -> float | None:
        """Seconds until the oldest held background request may step (None: none is held)."""
        if not self._pending:
            return None
        oldest = min(r.submitted for r in self._pending)
        return max(0.0, oldest + self._background_wait_s - time.monotonic())

    def _step(self, work: list[_Request]) -> list[tuple[_Request, BaseException | None]]:
        """One step: the requests that fit a step together in one pass, then one chunk of the
        oldest longer evaluation. Returns the requests completed."""
        for request in work:
            if request.start < 0 and not self._awaits_shared_prompt(request, work):
                self._begin(request)
        begun = [r for r in work if r.start >= 0]
        finished = [(r, None) for r in begun if r.remaining == 0]
        ready = [r for r in begun if 0 < r.remaining <= self._step_positions]
        if ready:
            self._pass(ready)
            finished += [(r, None) for r in ready]
        long = next((r for r in begun if r.remaining > self._step_positions), None)
        if long is not None:
            self._chunk(long)
        for request, _ in finished:
            new_prompt = request.outputs == 0 and request.reused < len(request.tokens)
            if new_prompt and self._prompts is not None:
                # Its stream holds exactly the prompt: kept for the jobs to come.
                slot = request.slot
                save_prompt(self._ctx, slot.index, self._prompts, request.tokens, slot.wall)
        return finished

    def _awaits_shared_prompt(self, request: _Request, work: list[_Request]) -> bool:
        """Whether a new prompt waits for another being evaluated that shares more than a
        step's tokens with it beyond what its slot holds (one document, several questions, sent
        together). Once that prompt is saved in the prompt cache this one restores it and
        evaluates only the rest; begun together, each would evaluate the whole. Long
        evaluations go one at a time anyway, so the wait costs it nothing. Only a prompt behind
        the same wall is waited for: another's would time this one by its text."""
        if request.outputs or self._prompts is None:
            return False
        slot = request.slot
        held = common_prefix(slot.cached, request.tokens) if slot.held_wall == slot.wall else 0
        # A begun prompt still in the work is saved when it finishes, at the end of a step.
        return any(
            other.outputs == 0
            and other.start >= 0
            and other.slot.wall == slot.wall
            and common_prefix(other.tokens, request.tokens) - held > self._step_positions
            for other in work
            if other is not request
        )

    def _begin(self, request: _Request) -> None:
        """Drop the slot's cached tokens past what the request shares (and past its first
        output, whose logits only a pass produces), all of them when another wall's job left
        them. A prompt first restores the saved state of the worker's prompt cache that shares
        more of it than the slot holds."""
        slot = request.slot
        if slot.held_wall != slot.wall:
            self._empty(slot)
            slot.held_wall = slot.wall
        if request.outputs == 0:
            self._share_prefix(request)
        keep = min(common_prefix(slot.cached, request.tokens), request.first_output)
        if keep < len(slot.cached):
            llama_cpp.llama_memory_seq_rm(self._memory, slot.index, keep, -1)
            del slot.cached[keep:]
        request.start = request.reused = keep

    def _share_prefix(self, request: _Request) -> None:
        """Start a prompt from the saved state of the worker's prompt cache that shares more of
        it than the slot holds (saved by any slot, or by the base model's own prefills, behind
        the same wall). Not from another slot's cells directly: llama.cpp copies a stream only
        at the next pass, after which a restore or a save in the same step would read or move
        stale cells."""
        if self._prompts is None:
            return
        slot, tokens = request.slot, request.tokens
        hit = self._prompts.longest(tokens, wall=slot.wall)
        if hit is not None and hit.shared > common_prefix(slot.cached, tokens):
            slot.cached.clear()
            if restore_prompt(self._ctx, slot.index, hit.saved):
                slot.cached.extend(hit.saved.tokens)

    def _pass(self, requests: list[_Request]) -> None:
        """Evaluate every request's remaining tokens in one pass, each slot from the lowest to
        the highest in it padded to the same length (llama.cpp's condition for one pass)."""
        width = max(r.remaining for r in requests)
        by_slot = {r.slot.index: r for r in requests}
        low, high = min(by_slot), max(by_slot)
        walls = {r.slot.wall for r in requests}
        entries = []  # (slot, tokens, first output position, request)
        for index in range(low, high + 1):
            slot = self._slots[index]
            request = by_slot.get(index)
            if request is None and not slot.open and walls != {slot.held_wall}:
                self._empty(slot)  # a finished job's cells, padded alongside another wall's
            real = request.tokens[request.start :] if request else []
            last = real[-1] if real else (slot.cached[-1] if slot.cached else 0)
            first = request.first_output if request else len(slot.cached) + width
            entries.append((slot, [*real, *[last] * (width - len(real))], first, request))
        started = time.perf_counter()
        self._decode(entries)
        self._last_pass = (low, high, set(by_slot))
        self._last_pass_s = time.perf_counter() - started
        for slot, _, _, request in entries:
            if request is not None:
                slot.cached.extend(request.tokens[request.start :])
                request.start = len(request.tokens)
            # The filler's cells go at once: the stream again holds exactly slot.cached.
            llama_cpp.llama_memory_seq_rm(self._memory, slot.index, len(slot.cached), -1)

    def _chunk(self, request: _Request) -> None:
        """Evaluate the next chunk of a long evaluation in a pass of its own."""
        slot = request.slot
        chunk = request.tokens[request.start : request.start + PREFILL_CHUNK]
        self._decode([(slot, chunk, request.first_output, request)])
        slot.cached.extend(chunk)
        request.start += len(chunk)

    def _decode(self, entries) -> None:
        batch = self._batch
        n = 0
        wanted: dict[_Request, list[int]] = {}  # a request's output positions' batch indices
        for slot, tokens, first_output, request in entries:
            start = len(slot.cached)
            for i, token in enumerate(tokens):
                output = start + i >= first_output
                batch.token[n] = token
                batch.pos[n] = start + i
                batch.n_seq_id[n] = 1
                batch.seq_id[n][0] = slot.index
                batch.logits[n] = output
                if output and request is not None and start + i < len(request.tokens):
                    wanted.setdefault(request, []).append(n)
                n += 1
        batch.n_tokens = n
        started = time.perf_counter()
        status = llama_cpp.llama_decode(self._ctx, batch)
        self.passes += 1
        self.positions += n
        if status != 0:
            raise RuntimeError(f"llama_decode failed with status {status}")
        if self.on_pass is not None:
            working = sum(request is not None for *_, request in entries)
            self.on_pass(working, n, time.perf_counter() - started)
        for request, indices in wanted.items():
            # A slot's positions are consecutive in the batch, so its rows come in one copy.
            rows = range(indices[0], indices[-1] + 1)
            request.rows.append(logits_rows(self._ctx, rows, self.base.vocab_size))

    def _forget(self, work: list[_Request]) -> None:
        """After a failed pass its streams may hold part of it: empty them."""
        for slot in {r.slot.index: r.slot for r in work}.values():
            self._empty(slot)

    def _empty(self, slot: _Slot) -> None:
        llama_cpp.llama_memory_seq_rm(self._memory, slot.index, -1, -1)
        slot.cached.clear()


def _finish(request: _Request, error: BaseException | None) -> None:
    request.error = error
    request.done.set()


def _free(ctx, batch) -> None:
    llama_cpp.llama_batch_free(batch)
    llama_cpp.llama_free(ctx)


class SequenceProvider(Provider):
    """One job's view of a SequenceEngine: the base model's provider contract, on one slot."""

    def __init__(self, engine: SequenceEngine, slot: _Slot) -> None:
        self._engine = engine
        self._slot = slot
        self.identity = engine.base.identity
        self.vocab_size = engine.base.vocab_size
        self.tokenizer = engine.base.tokenizer

    def prefill(self, context: Sequence[int]) -> int:
        # The last prompt token is left for the first logits call, which needs its logits.
        return self._engine.submit(self._slot, list(context[:-1]), 0).reused

    def logits(self, context: Sequence[int], num_positions: int) -> np.ndarray:
        blocks = self._engine.submit(self._slot, list(context), num_positions).rows
        if len(blocks) == 1:
            return blocks[0]
        if blocks:  # outputs that straddled two chunks of a long evaluation
            return np.concatenate(blocks)
        return np.empty((0, self.vocab_size), dtype=np.float32)

    def neighbours(self) -> Neighbours:
        return self._engine.neighbours(self._slot)

    def close(self) -> None:
        self._engine.release(self._slot)

    def __enter__(self) -> SequenceProvider:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

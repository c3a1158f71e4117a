"""How the speculative benchmark runs each system once on one prompt, and the main table's runs.

Bench holds the models (the default GGUF as the engine's provider and as llama-cpp-python's own
Llama, and the transformers copy) and returns the same figures for every system: output tokens,
prefill_ns, decode_ns, decode_tokens and e2e_ns, and for Pathfinder its steps and audit cost.
"""

from __future__ import annotations

import cProfile
import gc
import time
import uuid
from pathlib import Path

import numpy as np

from bench.peers import NullSink
from bench.speculative_cells import (
    HF,
    HF_PLD,
    LOOP,
    PF_AUDIT,
    PF_NOAUDIT,
    PLAIN,
    SHIPPED_NGRAMS,
    SPEC_NAME,
    TEMPERATURES,
    workloads,
)
from decoding.engine import AuditSink

# The verify-cost curve is measured on the same text the worker measures it on at load
# (decoding/worker/runtime.py), over a finer grid of positions so the schedule interpolates less.
WARMUP_TEXT = "The verify cost is measured once, when the model loads."


class StepStats(AuditSink):
    """Wraps the sink the decoder is given: notes each step's figures in record(), then hands
    record() and flush() to the inner sink unchanged: this is how the run sees every step.
    commits counts the inner TrailSink's transactions (a record() that emptied its buffer, or a
    flush() that found one)."""

    def __init__(self, inner: AuditSink) -> None:
        self.inner = inner
        self.steps: list[tuple[int, int, int, int, int]] = []
        self.flush_calls = 0
        self.commits = 0

    def _pending(self) -> int | None:
        pending = getattr(self.inner, "_pending", None)
        return None if pending is None else len(pending)

    def record(self, record) -> None:
        self.steps.append(
            (
                record.drafted_count,
                record.accepted_count,
                len(record.emitted),
                record.draft_ns,
                record.verify_ns,
            )
        )
        before = self._pending()
        self.inner.record(record)
        if before is not None and self._pending() <= before:
            self.commits += 1

    def flush(self) -> None:
        self.flush_calls += 1
        before = self._pending()
        self.inner.flush()
        if before:
            self.commits += 1


class BackoffSchedule:
    """PROTOTYPE (bench only) of a candidate AdaptiveSchedule change, measured in the settings
    section: exponential backoff of the probe interval while probes fail. Wraps a real
    AdaptiveSchedule; reads and sets its probe interval and idle count, which a real change
    would do inside schedule.py."""

    def __init__(self, inner, max_probe_interval: int) -> None:
        self.inner = inner
        self.base = inner._probe_interval
        self.max_interval = max_probe_interval
        self.probing = False
        self.backoffs = 0

    def next_length(self, max_length: int) -> int:
        inner = self.inner
        self.probing = inner.best_length(max_length) == 0 and inner._idle >= inner._probe_interval
        return inner.next_length(max_length)

    def observe(self, drafted: int, accepted: int) -> None:
        inner = self.inner
        if self.probing and drafted > 0:
            if accepted > 0:
                inner._probe_interval = self.base
            else:
                inner._probe_interval = min(2 * inner._probe_interval, self.max_interval)
                self.backoffs += 1
        inner.observe(drafted, accepted)


class CallTimer:
    """Wraps provider.logits on the instance: time spent inside llama.cpp (decode + copy)."""

    def __init__(self, provider) -> None:
        self.ns = 0
        self.calls = 0
        self.positions = 0
        inner = provider.logits

        def logits(context, num_positions):
            started = time.perf_counter_ns()
            try:
                return inner(context, num_positions)
            finally:
                self.ns += time.perf_counter_ns() - started
                self.calls += 1
                self.positions += num_positions

        provider.logits = logits

    def reset(self) -> None:
        self.ns = self.calls = self.positions = 0


def shipped_ngrams() -> dict:
    """The default spec's prompt-lookup n-gram range, as the migrated database holds it."""
    from decoding.models import ModelSpec

    spec = ModelSpec.objects.filter(name=SPEC_NAME).first()
    settings = (spec.drafter_settings if spec else None) or SHIPPED_NGRAMS
    found = {
        "min_ngram": settings.get("min_ngram", 1),
        "max_ngram": settings.get("max_ngram", 3),
        "source": f"ModelSpec {SPEC_NAME!r}" if spec else "SHIPPED_NGRAMS (spec missing)",
    }
    if (found["min_ngram"], found["max_ngram"]) != (3, 3):
        print(f"note: the default spec drafts with {found}, not min 3 / max 3", flush=True)
    return found


def plain_llama(path: Path, args):
    """What a user runs: the high-level Llama object with its own generation loop."""
    import llama_cpp

    return llama_cpp.Llama(
        model_path=str(path),
        n_ctx=args.n_ctx,
        n_batch=512,
        n_threads=args.threads,
        n_threads_batch=args.threads,
        logits_all=False,
        verbose=False,
    )


class Bench:
    def __init__(self, args) -> None:
        from decoding.chat import render_chat
        from decoding.engine.providers.llamacpp import LlamaCppProvider
        from decoding.engine.weights import default_gguf_path

        self.args = args
        self.gguf = default_gguf_path()
        print(f"model: {self.gguf}", flush=True)
        self.target = LlamaCppProvider(
            self.gguf,
            name="smollm2-135m-instruct",
            revision="Q4_1",
            n_threads=args.threads,
            n_ctx=args.n_ctx,
        )
        self.target.bench_timer = CallTimer(self.target)
        self.trails: list = []
        self.tokenizer = self.target.tokenizer
        self.eos = self.tokenizer.eos_token_id
        self.llama = plain_llama(self.gguf, args)
        tok = self.tokenizer
        self.prompts = {}
        for name, text in workloads().items():
            rendered = render_chat(
                tok.chat_template,
                [{"role": "user", "content": text}],
                bos=tok.token_text(tok.bos_token_id),
                eos=tok.token_text(tok.eos_token_id),
            )
            self.prompts[name] = tok.encode(rendered, add_special=False)
        # A token no prompt starts with: evaluating it alone empties the provider's KV cache
        # of any shared prefix, so every timed run pays its full prefill.
        firsts = {ids[0] for ids in self.prompts.values()}
        self.flush_token = next(t for t in range(10, 1000) if t not in firsts)
        self.hf_model = None
        self.ngrams = shipped_ngrams()

    # --- the verify cost curve, as the worker measures it at load ------------------------------

    def measure_curve(self) -> dict[int, float]:
        from decoding.engine import measure_verify_cost

        top = self.args.draft_length + 1
        grid = sorted(
            {p for p in (1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 17, 24, 32) if p <= top} | {top}
        )
        warm = self.tokenizer.encode(WARMUP_TEXT)
        return measure_verify_cost(
            self.target, warm, positions=grid, repeats=self.args.curve_repeats
        )

    # --- llama.cpp plain: Llama.generate ------------------------------------------------------

    def run_plain(self, prompt, temperature, max_tokens, seed, llama=None) -> dict:
        llama = llama or self.llama
        llama.reset()  # no prefix reuse: the prompt is evaluated from scratch
        llama.set_seed(seed)
        out = []
        started = time.perf_counter_ns()
        first = None
        generator = llama.generate(
            prompt,
            temp=temperature,
            top_k=0,
            top_p=1.0,
            min_p=0.0,
            typical_p=1.0,
            repeat_penalty=1.0,
            reset=True,
        )
        for token in generator:
            if first is None:
                first = time.perf_counter_ns()
            out.append(int(token))
            if token == self.eos or len(out) >= max_tokens:
                break
        ended = time.perf_counter_ns()
        generator.close()
        return {
            "tokens": out,
            "prefill_ns": first - started,  # time to first token
            "decode_ns": ended - first,  # the other len(out) - 1 tokens
            "decode_tokens": len(out) - 1,
            "e2e_ns": ended - started,
        }

    # --- llama.cpp loop: the engine's provider, one position per call ----------------------------

    def run_loop(self, prompt, temperature, max_tokens, seed, cold: bool = True) -> dict:
        from decoding.engine import GenerationParams
        from decoding.engine.sampling import sample

        target = self.target
        if cold:
            target.logits([self.flush_token], 1)
        params = GenerationParams(
            max_tokens=max_tokens, temperature=temperature, top_k=0, top_p=1.0, seed=seed
        )
        rng = np.random.default_rng(seed)
        started = time.perf_counter_ns()
        target.prefill(prompt)
        decode_started = time.perf_counter_ns()
        context = list(prompt)
        out = []
        while len(out) < max_tokens:
            if temperature == 0:
                token = int(np.argmax(target.logits(context, 1)[0]))
            else:
                token = sample(target.next_distributions(context, 1, params)[0], rng.random())
            out.append(token)
            context.append(token)
            if token == self.eos:
                break
        ended = time.perf_counter_ns()
        return {
            "tokens": out,
            "prefill_ns": decode_started - started,
            "decode_ns": ended - decode_started,
            "decode_tokens": len(out),
            "e2e_ns": ended - started,
        }

    # --- Pathfinder -----------------------------------------------------------------------------

    def run_pathfinder(
        self,
        prompt,
        temperature,
        max_tokens,
        seed,
        *,
        audit: bool,
        curve: dict[int, float],
        profile: cProfile.Profile | None = None,
        target=None,
        min_ngram: int | None = None,
        max_ngram: int | None = None,
        backoff: bool = False,
        cold: bool = True,
    ) -> dict:
        from audit.store import trail_open, trail_seal
        from decoding.engine import (
            AdaptiveSchedule,
            GenerationParams,
            GenerationRequest,
            PromptLookupDrafter,
            SpeculativeDecoder,
        )
        from decoding.worker.sinks import TrailSink

        target = target or self.target
        timer = target.bench_timer
        if cold:  # else the prompt may still be cached: only the decode phase is comparable
            target.logits([self.flush_token], 1)
        params = GenerationParams(
            max_tokens=max_tokens,
            temperature=temperature,
            top_k=0,
            top_p=1.0,
            seed=seed,
            draft_length=self.args.draft_length,
            eos_token_id=self.eos,
        )
        request = GenerationRequest(
            request_id=str(uuid.uuid4()), prompt_token_ids=prompt, params=params
        )
        # The worker's defaults: the default spec's drafter_settings (decoding/worker/runtime.py).
        low = self.ngrams["min_ngram"] if min_ngram is None else min_ngram
        high = self.ngrams["max_ngram"] if max_ngram is None else max_ngram
        drafter = PromptLookupDrafter(target.vocab_size, min_ngram=low, max_ngram=max(high, low))
        schedule = AdaptiveSchedule(self.args.draft_length, verify_cost=curve)
        if backoff:
            schedule = BackoffSchedule(schedule, self.args.max_probe_interval)

        open_ns = seal_ns = 0
        trail = None
        if audit:
            started = time.perf_counter_ns()
            trail = trail_open(job_id=uuid.uuid4(), attempt=1)
            open_ns = time.perf_counter_ns() - started
            # The shipped sink, its default batch size, after the new trail's genesis.
            sink = StepStats(
                TrailSink(trail.id, head=(trail.record_count, trail.head_hash), salt=trail.salt)
            )
        else:
            sink = StepStats(NullSink())
        decoder = SpeculativeDecoder(drafter, target, sink, tokenizer=self.tokenizer)
        timer.reset()
        started = time.perf_counter_ns()
        if profile is not None:
            profile.enable()
        # As in the worker: the sink batches, generate() flushes before returning.
        result = decoder.generate(request, schedule=schedule)
        if profile is not None:
            profile.disable()
        ended = time.perf_counter_ns()
        if trail is not None:
            self.trails.append(trail.id)
        if audit:
            sealing = time.perf_counter_ns()
            trail_seal(trail_id=trail.id, outcome="succeeded")
            seal_ns = time.perf_counter_ns() - sealing
        steps = sink.steps
        drafts = [s[0] for s in steps]
        return {
            "tokens": list(result.output_token_ids),
            "prefill_ns": result.prefill_ns,
            # ends when the last batch of records is committed (inside generate())
            "decode_ns": result.decode_ns,
            "decode_tokens": len(result.output_token_ids),
            "e2e_ns": (ended - started) + open_ns + seal_ns,
            "trail_open_ns": open_ns,
            "trail_seal_ns": seal_ns,
            # the engine's: time inside sink.record and sink.flush, commits included
            "audit_ns": result.audit_ns,
            "commits": sink.commits if audit else None,
            "flush_calls": sink.flush_calls,
            "min_ngram": low,
            "max_ngram": max(high, low),
            "steps": result.steps,
            "drafted": result.drafted,
            "accepted": result.accepted,
            # tested: positions the rule decided on (accepted, plus the first rejection)
            "tested": sum(a + (1 if a < k else 0) for k, a, *_ in steps),
            "draft_lengths": drafts,
            "accepted_lengths": [s[1] for s in steps],
            "draft_ns": sum(s[3] for s in steps),
            "verify_ns": sum(s[4] for s in steps),
            "target_logits_ns": timer.ns,
            "target_calls": timer.calls,
            "target_positions": timer.positions,
            "stop_reason": result.stop_reason,
        }

    # --- Hugging Face transformers --------------------------------------------------------------

    def load_hf(self) -> dict:
        import torch
        from transformers import AutoModelForCausalLM

        from decoding.engine.providers.transformers_hf import TransformersProvider
        from decoding.engine.weights import weights_sha256

        torch.set_num_threads(self.args.threads)
        cache = Path(self.args.hf_cache)
        converted = cache / weights_sha256(self.gguf)
        started = time.perf_counter()
        if not converted.is_dir():
            print(f"converting the GGUF for transformers into {converted} (once)", flush=True)
            # The provider's own conversion: dequantize, save as safetensors under cache/<sha>.
            provider = TransformersProvider(self.gguf, name="smollm2", cache_dir=cache)
            del provider
            gc.collect()
        self.hf_model = AutoModelForCausalLM.from_pretrained(
            converted, dtype=torch.float32, local_files_only=True
        ).eval()
        return {
            "dir": str(converted),
            "load_s": round(time.perf_counter() - started, 2),
            "dtype": "float32",
            "torch_threads": torch.get_num_threads(),
        }

    def run_hf(self, prompt, temperature, max_tokens, seed, *, lookup: bool) -> dict:
        import torch
        from transformers.generation.streamers import BaseStreamer

        class TimingStreamer(BaseStreamer):
            def __init__(self):
                self.prompt_seen = False
                self.first = None

            def put(self, value):
                if not self.prompt_seen:  # generate() puts the prompt first
                    self.prompt_seen = True
                elif self.first is None:
                    self.first = time.perf_counter_ns()

            def end(self):
                pass

        streamer = TimingStreamer()
        torch.manual_seed(seed)
        kwargs = {
            "max_new_tokens": max_tokens,
            "eos_token_id": self.eos,
            "pad_token_id": self.eos,
            "streamer": streamer,
        }
        if temperature == 0:
            kwargs.update(do_sample=False)
        else:
            kwargs.update(do_sample=True, temperature=temperature, top_k=0, top_p=1.0)
        if lookup:
            kwargs["prompt_lookup_num_tokens"] = self.args.hf_lookup_tokens
        ids = torch.tensor([prompt])
        with torch.inference_mode():
            started = time.perf_counter_ns()
            output = self.hf_model.generate(
                input_ids=ids, attention_mask=torch.ones_like(ids), **kwargs
            )
            ended = time.perf_counter_ns()
        out = output[0, len(prompt) :].tolist()
        first = streamer.first or ended
        return {
            "tokens": out,
            "prefill_ns": first - started,
            "decode_ns": ended - first,
            "decode_tokens": len(out) - 1,
            "e2e_ns": ended - started,
        }

    def run(self, system, prompt, temperature, max_tokens, seed, curve) -> dict:
        if system == PLAIN:
            return self.run_plain(prompt, temperature, max_tokens, seed)
        if system == LOOP:
            return self.run_loop(prompt, temperature, max_tokens, seed)
        if system == PF_AUDIT:
            return self.run_pathfinder(
                prompt, temperature, max_tokens, seed, audit=True, curve=curve
            )
        if system == PF_NOAUDIT:
            return self.run_pathfinder(
                prompt, temperature, max_tokens, seed, audit=False, curve=curve
            )
        if system == HF:
            return self.run_hf(prompt, temperature, max_tokens, seed, lookup=False)
        if system == HF_PLD:
            return self.run_hf(prompt, temperature, max_tokens, seed, lookup=True)
        raise ValueError(system)


def run_table(bench: Bench, systems: list[str], cells, repeats: int, max_tokens: int, curve):
    """The main table's timed runs: every system on every cell, each repeat's order rotated."""
    # Warm-up: each system once, untimed (first-call allocations, DB connection, torch init).
    # The short prompt: a long one's prefill would only cost time.
    warm_prompt = bench.prompts["open-ended"]
    for system in systems:
        for temperature in (0.0, 0.7):
            bench.run(system, warm_prompt, temperature, 8, 0, curve)

    runs = []
    total = repeats * len(cells) * len(systems)
    done = 0
    for rep in range(repeats):
        for ci, (workload, temp_label) in enumerate(cells):
            temperature = TEMPERATURES[temp_label]
            prompt = bench.prompts[workload]
            # Rotate the order so that no system always runs first (or right after torch).
            shift = (rep + ci) % len(systems)
            order = systems[shift:] + systems[:shift]
            seed = 1000 + rep
            for system in order:
                result = bench.guard.measure(
                    lambda system=system, prompt=prompt, temperature=temperature, seed=seed: (
                        bench.run(system, prompt, temperature, max_tokens, seed, curve)
                    )
                )
                result.update(
                    workload=workload, temperature=temp_label, system=system, repeat=rep, seed=seed
                )
                runs.append(result)
                done += 1
                rate = result["decode_tokens"] / (result["decode_ns"] / 1e9)
                print(
                    f"[{done}/{total}] {workload:10s} {temp_label:6s} {system:22s} "
                    f"{len(result['tokens']):4d} tok  decode {rate:7.1f} tok/s  "
                    f"others' CPU {100 * result['foreign_cpu_share']:4.1f}%  "
                    f"e2e {result['e2e_ns'] / 1e9:6.2f} s",
                    flush=True,
                )
    return runs

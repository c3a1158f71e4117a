"""Speculative decoding benchmark: Pathfinder against llama.cpp and HF transformers, in one run.

    .venv/bin/python bench/speculative.py [--quick] [--out bench/results]

Everything runs side by side in this one process, on the same GGUF (the default
SmolLM2-135M-Instruct Q4_1), with the same prompts (rendered through the model's chat
template), and every figure is a ratio to llama.cpp plain decoding measured in the same run
(ARCHITECTURE.md, "Performance contract"). bench/README.md says what each column means.

Systems
  llama.cpp plain      llama-cpp-python's own loop: Llama.generate, temp 0 (greedy) or 0.7
  llama.cpp loop       the engine's LlamaCppProvider, one position per llama_decode, argmax or
                       a draw from the warped distribution: Pathfinder without speculation
  pathfinder+audit     SpeculativeDecoder as the worker runs it: PromptLookupDrafter with the
                       default spec's n-gram settings (min 3, max 3; read from the migrated
                       database), AdaptiveSchedule on the verify cost curve measured at load,
                       the real TrailSink into PostgreSQL (records of 16 steps per transaction,
                       the last batch committed before generate() returns), no on_step callback
                       (one would force a commit per step), a trail opened and sealed per run
  pathfinder, no audit the same, with a sink that does nothing
  hf greedy/sample     transformers model.generate on the GGUF dequantized to float32
  hf prompt lookup     the same with prompt_lookup_num_tokens (HF assisted generation)
"""

from __future__ import annotations

import argparse
import cProfile
import datetime as dt
import functools
import gc
import io
import json
import os
import pstats
import statistics
import sys
import time
import uuid
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never the model hub
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402

from bench.database import setup_database  # noqa: E402
from bench.machine import (  # noqa: E402
    Guard,
    git_revision,
    load_average,
    machine,
    wait_for_quiet,
    wait_until_idle,
)
from decoding.engine import AuditSink  # noqa: E402

# The default spec's prompt-lookup settings (decoding/migrations/0004_prompt_lookup_trigrams.py);
# the run reads the migrated spec and uses these only if it is missing.
SPEC_NAME = "smollm2-135m-instruct"
SHIPPED_NGRAMS = {"min_ngram": 3, "max_ngram": 3}

DEFAULT_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/pathfinder_bench"

PLAIN = "llama.cpp plain"
LOOP = "llama.cpp loop"
PF_AUDIT = "pathfinder+audit"
PF_NOAUDIT = "pathfinder, no audit"
HF = "hf generate"
HF_PLD = "hf prompt lookup"
SYSTEMS = [PLAIN, LOOP, PF_AUDIT, PF_NOAUDIT, HF, HF_PLD]
LLAMA_SYSTEMS = [PLAIN, LOOP, PF_AUDIT, PF_NOAUDIT]
PF_SYSTEMS = (PF_AUDIT, PF_NOAUDIT)
HF_SYSTEMS = [HF, HF_PLD]

TEMPERATURES = {"greedy": 0.0, "t=0.7": 0.7}

# The verify-cost curve is measured on the same text the worker measures it on at load
# (decoding/runtime.py), over a finer grid of positions so the schedule interpolates less.
WARMUP_TEXT = "The verify cost is measured once, when the model loads."

# ARCHITECTURE.md measured one position's logits differing by up to ~0.4 between a verify
# batch and one-token decoding; the gap between two tokens can move by twice that.
NEAR_TIE = 0.8


# ------------------------------------------------------------------------------------------------
# Workloads
# ------------------------------------------------------------------------------------------------


def workloads() -> dict[str, str]:
    contract = (BENCH / "data" / "contract.txt").read_text().strip()
    return {
        "open-ended": (
            "Write a short story about a lighthouse keeper who finds a message in a bottle. "
            "Describe the keeper, the storm that night, and what the message says."
        ),
        "extraction": (
            f"{contract}\n\nQuote Section 3 of this agreement verbatim, word for word, then "
            "list the parties and every dollar amount, quoting the sentence each appears in."
        ),
        "summary": (
            f"Summarize the following services agreement in about 150 words: the parties, the "
            f"services, the fees, the term and how it can be terminated.\n\n{contract}"
        ),
    }


# ------------------------------------------------------------------------------------------------
# PostgreSQL and Django
# ------------------------------------------------------------------------------------------------


class NullSink(AuditSink):
    """The audit sink switched off: commits nothing, costs nothing."""

    def record(self, record) -> None:
        pass


class StepStats(AuditSink):
    """Wraps the sink the decoder is given: notes each step's figures in record(), then hands
    record() and flush() to the inner sink unchanged. No on_step callback is passed to the
    decoder, since one forces a commit per step; this is how the run still sees every step.
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


# ------------------------------------------------------------------------------------------------
# Timing helpers
# ------------------------------------------------------------------------------------------------


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


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


# ------------------------------------------------------------------------------------------------
# The systems
# ------------------------------------------------------------------------------------------------


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


class Bench:
    def __init__(self, args) -> None:
        self.args = args
        import llama_cpp

        from decoding.chat import render_chat
        from decoding.engine.providers.llamacpp import LlamaCppProvider
        from decoding.engine.weights import default_gguf_path

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
        # What a user runs: the high-level Llama object with its own generation loop.
        self.llama = llama_cpp.Llama(
            model_path=str(self.gguf),
            n_ctx=args.n_ctx,
            n_batch=512,
            n_threads=args.threads,
            n_threads_batch=args.threads,
            logits_all=False,
            verbose=False,
        )
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
        from decoding.sinks import TrailSink

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
        # The worker's defaults: the default spec's drafter_settings (decoding/runtime.py).
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
            sink = StepStats(TrailSink(trail.id, head=(trail.record_count, trail.head_hash)))
        else:
            sink = StepStats(NullSink())
        decoder = SpeculativeDecoder(drafter, target, sink, tokenizer=self.tokenizer)
        timer.reset()
        started = time.perf_counter_ns()
        if profile is not None:
            profile.enable()
        # No on_step, as in the worker: the sink batches, generate() flushes before returning.
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


# ------------------------------------------------------------------------------------------------
# Analysis
# ------------------------------------------------------------------------------------------------


def expected_tokens(alpha: float, k: int) -> float:
    """Tokens per verify pass drafting k with per-token acceptance alpha (Leviathan et al.)."""
    if alpha >= 1:
        return k + 1.0
    return (1 - alpha ** (k + 1)) / (1 - alpha)


def bounds(run: dict, cost) -> dict:
    """Theoretical speed-ups, relative to one token per 1-position verify (cost(1))."""
    ks = run["draft_lengths"]
    c1 = cost(1)
    alpha = run["accepted"] / run["tested"] if run["tested"] else 0.0
    passes = sum(cost(k + 1) for k in ks)
    expected = sum(expected_tokens(alpha, k) for k in ks)
    drafted_steps = [k for k in ks if k > 0]
    return {
        "alpha": alpha,
        # E[tokens per pass] / relative pass cost, at the measured alpha and the chosen k's
        "bound_alpha": expected * c1 / passes if passes else None,
        # the tokens this run produced, if only its verify passes had cost time
        "bound_realized": run["decode_tokens"] * c1 / passes if passes else None,
        "mean_k": statistics.mean(ks) if ks else 0.0,
        "mean_k_drafting": statistics.mean(drafted_steps) if drafted_steps else 0.0,
        "share_steps_drafting": len(drafted_steps) / len(ks) if ks else 0.0,
    }


def best_k_bound(alpha: float, cost, max_k: int) -> tuple[int, float]:
    ratios = [expected_tokens(alpha, k) * cost(1) / cost(k + 1) for k in range(max_k + 1)]
    k = int(np.argmax(ratios))
    return k, ratios[k]


def first_mismatch(a, b) -> int | None:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def near_tie(bench: Bench, prompt, reference, other, at) -> dict:
    """Single-token logits at the first mismatch: how far apart the two picks are."""
    context = [*prompt, *reference[:at]]
    target = bench.target
    target.logits([bench.flush_token], 1)
    target.logits(context[:-1], 1)  # prefix as a batch, then the last token on its own
    row = target.logits(context, 1)[0]
    top = np.sort(row)[-2:]
    a, b = reference[at], (other[at] if at < len(other) else None)
    return {
        "position": at,
        "reference_token": a,
        "other_token": b,
        "logit_reference": float(row[a]),
        "logit_other": None if b is None else float(row[b]),
        "gap": None if b is None else float(row[a] - row[b]),
        "top2_gap": float(top[1] - top[0]),
    }


# ------------------------------------------------------------------------------------------------
# The profile of the Pathfinder loop
# ------------------------------------------------------------------------------------------------

PROFILE_BUCKETS = [
    # (label, file suffix, function name): cumulative time of that function
    ("prefill (drafter + target, the prompt)", "providers/llamacpp.py", "prefill"),
    (
        "llama.cpp _decode, prefill included (llama_decode + batch fill)",
        "providers/llamacpp.py",
        "_decode",
    ),
    ("logits copy out of llama.cpp", "providers/llamacpp.py", "_logits_row"),
    ("warp: softmax over the vocabulary (float64)", "engine/sampling.py", "warp"),
    ("verify rule (greedy)", "engine/rules.py", "verify_greedy"),
    ("verify rule (sampling)", "engine/rules.py", "verify_sampling"),
    ("drafter.propose (n-gram lookup + one-hot q)", "drafters/prompt_lookup.py", "propose"),
    ("token texts for the record", "engine/decoder.py", "_texts"),
    ("schedule (next_length + observe)", "engine/schedule.py", "next_length"),
    ("schedule observe", "engine/schedule.py", "observe"),
    # the decoder's sink.record and sink.flush calls, through StepStats: the engine's audit_ns
    ("audit: sink.record + sink.flush", "bench/speculative.py", "record"),
    ("audit: sink.record + sink.flush", "bench/speculative.py", "flush"),
    ("  StepRecord.payload()", "engine/records.py", "payload"),
    ("  canonical JSON", "audit/chain.py", "canonical_json"),
    ("  trail_append_many (one transaction per batch)", "audit/store.py", "trail_append_many"),
    ("  record hash", "audit/chain.py", "record_hash"),
    ("  transaction.atomic exit (COMMIT)", "django/db/transaction.py", "__exit__"),
    ("  SELECT ... FOR UPDATE (trail get)", "django/db/models/query.py", "get"),
    ("  INSERT records (bulk_create)", "django/db/models/query.py", "bulk_create"),
    ("  UPDATE trail head", "django/db/models/query.py", "update"),
]


def profile_summary(profile: cProfile.Profile, run: dict) -> dict:
    stats = pstats.Stats(profile)
    found = defaultdict(float)
    generate = 0.0
    for (filename, _line, function), (_cc, _nc, _tt, ct, _callers) in stats.stats.items():
        if function == "generate" and filename.endswith("engine/decoder.py"):
            generate = ct
        for label, suffix, name in PROFILE_BUCKETS:
            if function == name and filename.replace("\\", "/").endswith(suffix):
                found[label] += ct
    text = io.StringIO()
    pstats.Stats(profile, stream=text).sort_stats("tottime").print_stats(18)
    lines = text.getvalue().splitlines()
    start = next((i for i, ln in enumerate(lines) if "ncalls" in ln), 0)
    return {
        "buckets_s": {
            label: round(found[label], 4) for label, *_ in PROFILE_BUCKETS if label in found
        },
        "generate_s": round(generate, 4),
        "tokens": len(run["tokens"]),
        "steps": run["steps"],
        "prefill_s": round(run["prefill_ns"] / 1e9, 4),
        "decode_s": round(run["decode_ns"] / 1e9, 4),
        "top_tottime": [ln.rstrip() for ln in lines[start:] if ln.strip()][:19],
    }


# ------------------------------------------------------------------------------------------------
# Drafter and schedule settings (no audit, decode phase only)
# ------------------------------------------------------------------------------------------------

# (label, min_ngram, probe backoff); max_ngram is the default spec's (3), or min_ngram if larger
VARIANTS = [
    ("min_ngram 1, adaptive (the default before migration 0004)", 1, False),
    ("min_ngram 1, adaptive + probe backoff", 1, True),
    ("min_ngram 2, adaptive", 2, False),
    ("min_ngram 3, adaptive (shipped default)", 3, False),
    ("min_ngram 3, adaptive + probe backoff", 3, True),
]


def variants_section(bench: Bench, cells, max_tokens: int, repeats: int, curve) -> dict:
    """Pathfinder without audit under other drafter/schedule settings, against the one-token
    loop, in the same minutes. The prompt stays cached between these runs (the decode phase is
    what is compared, and it is unaffected), so each costs no prefill."""
    runs = []
    labels = [LOOP] + [v[0] for v in VARIANTS]
    for rep in range(repeats):
        for ci, (workload, temp_label) in enumerate(cells):
            prompt, temperature = bench.prompts[workload], TEMPERATURES[temp_label]
            shift = (rep + ci) % len(labels)
            for label in labels[shift:] + labels[:shift]:

                def run(label=label, prompt=prompt, temperature=temperature, rep=rep):
                    if label == LOOP:
                        return bench.run_loop(
                            prompt, temperature, max_tokens, 1000 + rep, cold=False
                        )
                    _, min_ngram, backoff = next(v for v in VARIANTS if v[0] == label)
                    return bench.run_pathfinder(
                        prompt,
                        temperature,
                        max_tokens,
                        1000 + rep,
                        audit=False,
                        curve=curve,
                        min_ngram=min_ngram,
                        backoff=backoff,
                        cold=False,
                    )

                r = bench.guard.measure(run)
                r.update(workload=workload, temperature=temp_label, system=label, repeat=rep)
                runs.append(r)
        print(f"variants: repeat {rep + 1}/{repeats} done", flush=True)
    table = []
    for workload, temp_label in cells:
        mine = [r for r in runs if (r["workload"], r["temperature"]) == (workload, temp_label)]
        rate = {
            label: median(
                [r["decode_tokens"] / (r["decode_ns"] / 1e9) for r in mine if r["system"] == label]
            )
            for label in labels
        }
        for label in labels[1:]:
            rs = [r for r in mine if r["system"] == label]
            table.append(
                {
                    "workload": workload,
                    "temperature": temp_label,
                    "variant": label,
                    "decode_tok_s": rate[label],
                    "loop_tok_s": rate[LOOP],
                    "ratio_loop": rate[label] / rate[LOOP],
                    "acceptance_rate": median(
                        [r["accepted"] / r["drafted"] if r["drafted"] else 0.0 for r in rs]
                    ),
                    "tokens_per_step": median([len(r["tokens"]) / r["steps"] for r in rs]),
                    "mean_k": median([statistics.mean(r["draft_lengths"]) for r in rs]),
                }
            )
    return {"runs": runs, "table": table, "repeats": repeats, "shipped": bench.ngrams}


# ------------------------------------------------------------------------------------------------
# Appendix: the same weights requantized, to see whether the verify-cost curve is the format's
# ------------------------------------------------------------------------------------------------

ALT_QUANTS = {"Q4_0": 2, "Q8_0": 7, "F16": 1}  # llama_ftype values
ALT_RUN = "Q4_0"  # the format the decode cells are also run on


def requantized(bench: Bench, name: str) -> Path:
    """bench/.cache/gguf/<name>.gguf: the shipped Q4_1 GGUF requantized by llama.cpp (once)."""
    import ctypes

    import llama_cpp

    path = Path(bench.args.gguf_cache) / f"smollm2-135m-instruct.from-Q4_1.{name}.gguf"
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        params = llama_cpp.llama_model_quantize_default_params()
        params.ftype = ALT_QUANTS[name]
        params.allow_requantize = True
        params.nthread = bench.args.threads
        scratch = path.with_suffix(".part")
        status = llama_cpp.llama_model_quantize(
            str(bench.gguf).encode(), str(scratch).encode(), ctypes.byref(params)
        )
        if status != 0:
            raise RuntimeError(f"llama_model_quantize to {name} failed ({status})")
        scratch.rename(path)
    return path


def alt_quant_appendix(bench: Bench, cells, max_tokens: int, repeats: int) -> dict:
    import llama_cpp

    from decoding.engine import measure_verify_cost
    from decoding.engine.providers.llamacpp import LlamaCppProvider
    from decoding.engine.schedule import interpolated

    args = bench.args
    top = args.draft_length + 1
    grid = sorted({p for p in (1, 2, 4, 8, 16, 17, 24, 32) if p <= top} | {top})
    warm = bench.tokenizer.encode(WARMUP_TEXT)
    out = {"curves": {}, "runs": [], "format": ALT_RUN}
    for name in ALT_QUANTS:
        path = requantized(bench, name)
        provider = LlamaCppProvider(
            path,
            name=f"smollm2-135m-instruct-{name}",
            revision=name,
            n_threads=args.threads,
            n_ctx=args.n_ctx,
        )
        curve = measure_verify_cost(provider, warm, positions=grid, repeats=args.curve_repeats)
        fn = interpolated(curve)
        best = max(range(1, top + 1), key=lambda n: n * fn(1) / fn(n))
        out["curves"][name] = {
            "file_mib": round(path.stat().st_size / 2**20, 1),
            "cost_s": {str(n): c for n, c in curve.items()},
            "perfect_bound": {"positions": best, "ratio": best * fn(1) / fn(best)},
        }
        print(
            f"appendix {name}: verify cost (ms)",
            {n: round(c * 1e3, 2) for n, c in curve.items()},
            flush=True,
        )
        if name != ALT_RUN:
            del provider
            continue
        provider.bench_timer = CallTimer(provider)
        llama = llama_cpp.Llama(
            model_path=str(path),
            n_ctx=args.n_ctx,
            n_batch=512,
            n_threads=args.threads,
            n_threads_batch=args.threads,
            logits_all=False,
            verbose=False,
        )
        systems = [PLAIN, PF_AUDIT, PF_NOAUDIT]
        for workload, temp_label in cells:  # warm-up, untimed
            for system in systems:
                run_on(
                    bench,
                    system,
                    llama,
                    provider,
                    curve,
                    bench.prompts[workload],
                    TEMPERATURES[temp_label],
                    8,
                    0,
                )
        for rep in range(repeats):
            for ci, (workload, temp_label) in enumerate(cells):
                shift = (rep + ci) % len(systems)
                for system in systems[shift:] + systems[:shift]:
                    job = functools.partial(
                        run_on,
                        bench,
                        system,
                        llama,
                        provider,
                        curve,
                        bench.prompts[workload],
                        TEMPERATURES[temp_label],
                        max_tokens,
                        1000 + rep,
                    )
                    r = bench.guard.measure(job)
                    r.update(
                        workload=workload,
                        temperature=temp_label,
                        system=system,
                        repeat=rep,
                        seed=1000 + rep,
                    )
                    out["runs"].append(r)
                    print(
                        f"appendix {name} {workload} {temp_label} {system}: "
                        f"{r['decode_tokens'] / (r['decode_ns'] / 1e9):.1f} tok/s",
                        flush=True,
                    )
        out["table"] = [dict(v) for v in aggregate(out["runs"], fn).values()]
        del llama, provider
        gc.collect()
    return out


def run_on(bench: Bench, system, llama, provider, curve, prompt, temperature, max_tokens, seed):
    if system == PLAIN:
        return bench.run_plain(prompt, temperature, max_tokens, seed, llama=llama)
    return bench.run_pathfinder(
        prompt,
        temperature,
        max_tokens,
        seed,
        curve=curve,
        audit=system != PF_NOAUDIT,
        target=provider,
    )


# ------------------------------------------------------------------------------------------------
# Reports
# ------------------------------------------------------------------------------------------------


def fmt(x, spec=".2f", none="–"):
    return none if x is None else format(x, spec)


def aggregate(runs: list[dict], curve_fn) -> dict:
    cells = defaultdict(list)
    for r in runs:
        cells[(r["workload"], r["temperature"], r["system"])].append(r)
    table = {}
    for (w, t, s), rs in cells.items():
        tok_s = [r["decode_tokens"] / (r["decode_ns"] / 1e9) for r in rs if r["decode_ns"] > 0]
        row = {
            "workload": w,
            "temperature": t,
            "system": s,
            "repeats": len(rs),
            "tokens": median([len(r["tokens"]) for r in rs]),
            "prefill_s": median([r["prefill_ns"] / 1e9 for r in rs]),
            "decode_s": median([r["decode_ns"] / 1e9 for r in rs]),
            "decode_tok_s": median(tok_s),
            "e2e_s": median([r["e2e_ns"] / 1e9 for r in rs]),
            "e2e_s_per_token": median([r["e2e_ns"] / 1e9 / len(r["tokens"]) for r in rs]),
        }
        if s in PF_SYSTEMS:
            b = [bounds(r, curve_fn) for r in rs]
            row.update(
                acceptance_rate=median(
                    [r["accepted"] / r["drafted"] if r["drafted"] else 0.0 for r in rs]
                ),
                alpha_tested=median([x["alpha"] for x in b]),
                mean_accepted_length=median([r["accepted"] / r["steps"] for r in rs]),
                tokens_per_step=median([len(r["tokens"]) / r["steps"] for r in rs]),
                steps=median([r["steps"] for r in rs]),
                mean_k=median([x["mean_k"] for x in b]),
                mean_k_drafting=median([x["mean_k_drafting"] for x in b]),
                share_steps_drafting=median([x["share_steps_drafting"] for x in b]),
                bound_alpha=median([x["bound_alpha"] for x in b]),
                bound_realized=median([x["bound_realized"] for x in b]),
                audit_ns_share=median([r["audit_ns"] / r["decode_ns"] for r in rs]),
                breakdown_ms_per_token={
                    "target logits (llama.cpp)": median(
                        [r["target_logits_ns"] / 1e6 / len(r["tokens"]) for r in rs]
                    ),
                    "warp + verify rule": median(
                        [
                            (r["verify_ns"] - r["target_logits_ns"]) / 1e6 / len(r["tokens"])
                            for r in rs
                        ]
                    ),
                    "draft": median([r["draft_ns"] / 1e6 / len(r["tokens"]) for r in rs]),
                    "audit sink": median([r["audit_ns"] / 1e6 / len(r["tokens"]) for r in rs]),
                    "other (loop, record, texts, schedule)": median(
                        [
                            (r["decode_ns"] - r["verify_ns"] - r["draft_ns"] - r["audit_ns"])
                            / 1e6
                            / len(r["tokens"])
                            for r in rs
                        ]
                    ),
                },
                trail_open_seal_ms=median(
                    [(r["trail_open_ns"] + r["trail_seal_ns"]) / 1e6 for r in rs]
                )
                if s != PF_NOAUDIT
                else None,
                commits=median([r.get("commits") for r in rs]) if s != PF_NOAUDIT else None,
            )
        table[(w, t, s)] = row
    # ratios to llama.cpp plain, audit overhead
    for (w, t, s), row in table.items():
        plain = table.get((w, t, PLAIN))
        loop = table.get((w, t, LOOP))
        if plain and plain["decode_tok_s"] and row["decode_tok_s"]:
            row["decode_ratio_plain"] = row["decode_tok_s"] / plain["decode_tok_s"]
            row["e2e_ratio_plain"] = plain["e2e_s_per_token"] / row["e2e_s_per_token"]
        if loop and loop["decode_tok_s"] and row["decode_tok_s"]:
            row["decode_ratio_loop"] = row["decode_tok_s"] / loop["decode_tok_s"]
        if s == PF_AUDIT and (w, t, PF_NOAUDIT) in table:
            off = table[(w, t, PF_NOAUDIT)]
            row["audit_overhead"] = (row["decode_s"] - off["decode_s"]) / off["decode_s"]
            # paired by repeat: same seed, same tokens, same steps
            pairs = defaultdict(dict)
            for r in runs:
                if (r["workload"], r["temperature"]) == (w, t) and r["system"] in (s, PF_NOAUDIT):
                    pairs[r["repeat"]][r["system"]] = r
            row["audit_overhead_paired"] = median(
                [
                    (p[s]["decode_ns"] - p[PF_NOAUDIT]["decode_ns"]) / p[PF_NOAUDIT]["decode_ns"]
                    for p in pairs.values()
                    if len(p) == 2
                ]
            )
            row["same_tokens_as_no_audit"] = all(
                p[s]["tokens"] == p[PF_NOAUDIT]["tokens"] for p in pairs.values() if len(p) == 2
            )
    return table


def write_plot(table: dict, systems: list[str], path: Path) -> str | None:
    """Draw the decode tok/s chart into path; None (and a note) without matplotlib."""
    try:
        import matplotlib
    except ImportError:
        print(
            "matplotlib (the bench extra) is not installed: no plot. Install it, then "
            f"`python bench/speculative.py --render {path.with_suffix('.json')}` draws it.",
            flush=True,
        )
        return None

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = sorted({(w, t) for w, t, _ in table}, key=lambda x: (x[1], x[0]))
    fig, ax = plt.subplots(figsize=(12, 5.5))
    width = 0.8 / len(systems)
    for i, s in enumerate(systems):
        ys = [table.get((w, t, s), {}).get("decode_tok_s") or 0 for w, t in groups]
        xs = np.arange(len(groups)) + (i - (len(systems) - 1) / 2) * width
        ax.bar(xs, ys, width, label=s)
        for x, y in zip(xs, ys, strict=True):
            if y:
                ax.text(x, y, f"{y:.0f}", ha="center", va="bottom", fontsize=7)
    ax.set_xticks(np.arange(len(groups)))
    ax.set_xticklabels([f"{w}\n{t}" for w, t in groups])
    ax.set_ylabel("decode tokens/s (median)")
    ax.set_title("SmolLM2-135M-Instruct Q4_1, decode phase: Pathfinder vs llama.cpp vs HF")
    ax.legend(fontsize=8, ncol=3)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path.name


def pathfinder_line(report: dict) -> list[str]:
    pf = report.get("pathfinder")
    if not pf:
        return []
    ng = pf["ngrams"]
    return [
        f"Pathfinder as shipped: prompt lookup min_ngram {ng['min_ngram']}, max_ngram "
        f"{ng['max_ngram']} (from {ng['source']}), adaptive schedule, `TrailSink` committing "
        f"{pf['batch_steps']} steps per transaction, no `on_step` callback."
    ]


def markdown(report: dict, table: dict) -> str:
    m = report["machine"]
    lines = [
        f"# Speculative decoding benchmark — {report['date']}",
        "",
        f"Command: `{report['command']}`  ",
        f"Repository: {report['git']}  ",
        (
            f"Plot: `{report['plot']}`  "
            if report.get("plot")
            else "Plot: not drawn (matplotlib, the `bench` extra, was not installed); "
            "`--render` on this run's .json draws it.  "
        ),
        f"Model: `{report['model']}` (SmolLM2-135M-Instruct, Q4_1 GGUF)  ",
        f"Mode: {'quick (development only, not a result)' if report['quick'] else 'full'}; "
        f"max new tokens {report['max_tokens']} (stop at end-of-sequence), "
        f"{report['repeats']} repeats per cell, medians; draft length cap "
        f"{report['draft_length']}; llama.cpp and torch threads {report['threads']}.  ",
        *pathfinder_line(report),
        "",
        "## Machine",
        "",
        f"- CPU: {m['cpu']} ({m['cores']} cores visible; SIMD: {m['simd']})",
        f"- RAM: {m['ram_gib']} GiB; OS: {m['os']}",
        f"- Python {m['python']}, llama-cpp-python {m['llama_cpp_python']}, torch {m['torch']}, "
        f"transformers {m['transformers']}, numpy {m['numpy']}, Django {m.get('django', '?')}",
        f"- PostgreSQL {report['postgres']['server_version']} on 127.0.0.1 (database "
        f"`{report['postgres']['database']}`, fsync={report['postgres']['fsync']}, "
        f"synchronous_commit={report['postgres']['synchronous_commit']})",
        f"- Load average before the run: {fmt(report['load']['before_run'][0])} (1 min), "
        f"{fmt(report['load']['before_run'][1])} (5 min); after: "
        f"{fmt(report['load_after'][0])} (1 min). Waited {report['load']['waited_s']} s for "
        f"the 1-minute load to fall below {report['load']['threshold']}"
        f"{'' if report['load']['quiet'] else ' — IT DID NOT: the numbers are contaminated'}.",
        f"- CPU used by other processes (PostgreSQL included) during each timed run of the "
        f"main table, as a share of both cores: median "
        f"{100 * report['foreign_cpu']['median']:.1f}%, max "
        f"{100 * report['foreign_cpu']['max']:.1f}%; runs above 10%: "
        f"{report['foreign_cpu']['runs_over_10pct']} of {len(report['runs'])}. A run during "
        f"which others used more than {100 * report['foreign_cpu']['threshold']:.0f}% was "
        f"discarded and measured again after a wait for quiet: "
        f"{report['foreign_cpu']['remeasured']} times, {report['foreign_cpu']['waited_s']} s "
        "waited (all runs of the side sections are guarded the same way).",
        f"- Wall time of the whole run: {report['wall_s']:.0f} s.",
        "",
        "## Verify-cost curve (measured at load, `measure_verify_cost`, median of "
        f"{report['curve_repeats']})",
        "",
        "| positions | ms | × 1 position | positions per 1-position cost |",
        "|---:|---:|---:|---:|",
    ]
    c1 = report["verify_cost"]["1"]
    for n, c in report["verify_cost"].items():
        lines.append(f"| {n} | {c * 1e3:.2f} | {c / c1:.2f} | {int(n) * c1 / c:.2f} |")
    pb = report["perfect_bound"]
    lines += [
        "",
        f"With every drafted token accepted, the best a verify pass can do on this curve is "
        f"**{pb['ratio']:.2f}×** one-token decoding (at {pb['positions']} positions): the "
        "ceiling on any speed-up from speculation over the same llama.cpp kernels here.",
        "",
        "## Results (medians)",
        "",
        "Decode = tokens after the prefill, per second of decode phase. × plain = ratio to "
        "llama.cpp plain (Llama.generate) in this run; × loop = ratio to the one-token loop over "
        "the engine's own provider. e2e ratio = plain's end-to-end seconds per token / this "
        "system's. acc = accepted / drafted; len = accepted tokens per step; α = accepted / "
        "tested positions. Bound = expected tokens per pass at the measured α and chosen k, "
        "over the pass's cost, relative to one token per 1-position verify; realized = this "
        "run's tokens over its verify passes' cost on the curve (what it would reach if only "
        "verify passes took time).",
        "",
        "| workload | temp | system | tokens | prefill s | decode tok/s | × plain | × loop | "
        "e2e s | e2e × plain | acc | len | α | k̄ | bound | realized | audit % (Δ) | "
        "audit_ns/decode |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    # audit % (Δ) = (decode s with audit - without) / without, same seeds and tokens;
    # audit_ns/decode = the engine's audit_ns (inside sink.record and sink.flush) / decode_ns.
    order = {s: i for i, s in enumerate(SYSTEMS)}
    for key in sorted(table, key=lambda k: (k[1], k[0], order[k[2]])):
        r = table[key]
        pf = r["system"] in PF_SYSTEMS
        lines.append(
            "| "
            + " | ".join(
                [
                    r["workload"],
                    r["temperature"],
                    r["system"],
                    fmt(r["tokens"], ".0f"),
                    fmt(r["prefill_s"], ".3f"),
                    fmt(r["decode_tok_s"], ".1f"),
                    fmt(r.get("decode_ratio_plain"), ".2f"),
                    fmt(r.get("decode_ratio_loop"), ".2f"),
                    fmt(r["e2e_s"], ".2f"),
                    fmt(r.get("e2e_ratio_plain"), ".2f"),
                    fmt(r.get("acceptance_rate"), ".2f") if pf else "",
                    fmt(r.get("mean_accepted_length"), ".2f") if pf else "",
                    fmt(r.get("alpha_tested"), ".2f") if pf else "",
                    fmt(r.get("mean_k"), ".1f") if pf else "",
                    fmt(r.get("bound_alpha"), ".2f") if pf else "",
                    fmt(r.get("bound_realized"), ".2f") if pf else "",
                    (fmt(100 * r["audit_overhead"], ".1f") if "audit_overhead" in r else ""),
                    (
                        fmt(100 * r["audit_ns_share"], ".1f") + "%"
                        if r["system"] == PF_AUDIT
                        else ""
                    ),
                ]
            )
            + " |"
        )
    lines += ["", "## Targets", "", "| target | measured | met |", "|---|---|---|"]
    for t in report["targets"]:
        lines.append(f"| {t['target']} | {t['measured']} | {'yes' if t['met'] else '**no**'} |")
    lines += [
        "",
        "## Where Pathfinder's decode time goes (ms per output token, medians of the timed runs)",
        "",
        "Audit sink = the engine's audit_ns (sink.record and sink.flush, commits included); "
        "commits = the run's audit transactions (median).",
        "",
        "| workload | temp | system | target logits (llama.cpp) | warp + rule | draft | audit "
        "sink | other | trail open+seal ms | commits |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for key in sorted(table, key=lambda k: (k[1], k[0], order[k[2]])):
        r = table[key]
        if r["system"] not in PF_SYSTEMS:
            continue
        b = r["breakdown_ms_per_token"]
        lines.append(
            f"| {r['workload']} | {r['temperature']} | {r['system']} | "
            + " | ".join(fmt(v, ".3f") for v in b.values())
            + f" | {fmt(r.get('trail_open_seal_ms'), '.1f')} | {fmt(r.get('commits'), '.0f')} |"
        )
    if report.get("profiles"):
        lines += ["", "### cProfile of single Pathfinder+audit runs (not timed runs)", ""]
        for name, prof in report["profiles"].items():
            lines += [
                f"**{name}** — {prof['tokens']} tokens in {prof['steps']} steps; under the "
                f"profiler generate() took {prof['generate_s']:.3f} s (prefill "
                f"{prof['prefill_s']:.3f} s, decode {prof['decode_s']:.3f} s)",
                "",
                "| function (cumulative) | s | ms per step | share of generate() |",
                "|---|---:|---:|---:|",
            ]
            for label, secs in prof["buckets_s"].items():
                lines.append(
                    f"| {label} | {secs:.4f} | {1e3 * secs / prof['steps']:.3f} | "
                    f"{100 * secs / prof['generate_s']:.1f}% |"
                )
            lines += ["", "```", *prof["top_tottime"], "```", ""]
    lines += ["", "## Greedy exactness: Pathfinder vs llama.cpp plain, token for token", ""]
    for item in report["exactness"]:
        lines.append(f"- {item}")
    v = report.get("verification")
    if v:
        lines += [
            "",
            f"Audit trails written by this run, verified link by link with "
            f"`audit.verification.verify_trails`: {v['trails_checked']} trails, "
            f"{v['records_checked']} records, "
            f"{'all intact' if v['ok'] else 'FAILURES: ' + json.dumps(v['failures'])}.",
        ]
    var = report.get("variants")
    if var:
        shipped = var.get("shipped") or SHIPPED_NGRAMS
        lines += [
            "",
            "## Drafter and schedule settings (Pathfinder without audit, decode phase)",
            "",
            f"Same model and curve, {var['repeats']} repeats, medians; × loop = ratio to the "
            "one-token loop run in the same minutes. The shipped default spec drafts with "
            f"min_ngram {shipped['min_ngram']}, max_ngram {shipped['max_ngram']} "
            "(migration 0004; min_ngram 1 before it); max_ngram here is max(3, min_ngram). "
            "Probe backoff = a prototype schedule change, bench only, not shipped (the probe "
            "interval doubles after each "
            "failed probe, up to --max-probe-interval).",
            "",
            "| workload | temp | setting | decode tok/s | × loop | acc | tokens/step | k̄ |",
            "|---|---|---|---:|---:|---:|---:|---:|",
        ]
        for r in sorted(var["table"], key=lambda r: (r["temperature"], r["workload"])):
            lines.append(
                f"| {r['workload']} | {r['temperature']} | {r['variant']} | "
                f"{fmt(r['decode_tok_s'], '.1f')} | {fmt(r['ratio_loop'], '.2f')} | "
                f"{fmt(r['acceptance_rate'], '.2f')} | {fmt(r['tokens_per_step'], '.2f')} | "
                f"{fmt(r['mean_k'], '.1f')} |"
            )
    a = report.get("appendix")
    if a:
        lines += [
            "",
            "## Appendix: the same weights requantized by llama.cpp (not the shipped GGUF)",
            "",
            "Requantized from the shipped Q4_1 file with `llama_model_quantize` (so Q4_0 loses a "
            "little precision, Q8_0/F16 hold the Q4_1 weights almost exactly). Only the "
            "verify-cost curve's shape is the point here.",
            "",
            "| format | MiB | 1 pos ms | 2 | 4 | 8 | 16 | best positions per 1-position cost |",
            "|---|---:|---:|---:|---:|---:|---:|---:|",
        ]
        shipped = {
            "file_mib": None,
            "cost_s": report["verify_cost"],
            "perfect_bound": report["perfect_bound"],
        }
        for name, c in {"Q4_1 (shipped)": shipped, **a["curves"]}.items():
            cost = c["cost_s"]
            lines.append(
                f"| {name} | {fmt(c['file_mib'], '.0f')} | "
                + " | ".join(
                    fmt(cost.get(str(n), None) and cost[str(n)] * 1e3, ".2f")
                    for n in (1, 2, 4, 8, 16)
                )
                + f" | {c['perfect_bound']['ratio']:.2f}× at {c['perfect_bound']['positions']} |"
            )
        if a.get("table"):
            lines += [
                "",
                f"Decode cells on the {a['format']} copy (× plain = ratio to "
                f"Llama.generate on the same {a['format']} file):",
                "",
                "| workload | temp | system | tokens | decode tok/s | × plain | acc | len | "
                "k̄ | audit % (Δ) | audit_ns/decode |",
                "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|",
            ]
            order = {s: i for i, s in enumerate(SYSTEMS)}
            for r in sorted(a["table"], key=lambda r: (r["workload"], order[r["system"]])):
                pf = r["system"] in PF_SYSTEMS
                lines.append(
                    "| "
                    + " | ".join(
                        [
                            r["workload"],
                            r["temperature"],
                            r["system"],
                            fmt(r["tokens"], ".0f"),
                            fmt(r["decode_tok_s"], ".1f"),
                            fmt(r.get("decode_ratio_plain"), ".2f"),
                            fmt(r.get("acceptance_rate"), ".2f") if pf else "",
                            fmt(r.get("mean_accepted_length"), ".2f") if pf else "",
                            fmt(r.get("mean_k"), ".1f") if pf else "",
                            fmt(100 * r["audit_overhead"], ".1f") if "audit_overhead" in r else "",
                            fmt(100 * r["audit_ns_share"], ".1f") + "%"
                            if r["system"] == PF_AUDIT
                            else "",
                        ]
                    )
                    + " |"
                )
    if report.get("analysis"):
        lines += ["", "## Analysis", "", report["analysis"]]
    lines.append("")
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------
# Main
# ------------------------------------------------------------------------------------------------


def render(path: Path) -> int:
    report = json.loads(path.read_text())
    analysis = path.with_suffix(".analysis.md")
    if analysis.exists():
        report["analysis"] = analysis.read_text()
        path.write_text(json.dumps(report, indent=1, default=str))
    table = {(r["workload"], r["temperature"], r["system"]): r for r in report["table"]}
    systems = [s for s in SYSTEMS if any(k[2] == s for k in table)]
    plot = write_plot(table, systems, path.with_suffix(".png"))
    if plot != report.get("plot"):
        report["plot"] = plot
        path.write_text(json.dumps(report, indent=1, default=str))
    path.with_suffix(".md").write_text(markdown(report, table))
    print(f"rendered {path.with_suffix('.md')}" + (f" and {plot}" if plot else ""))
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--quick",
        action="store_true",
        help="development: 32 tokens, 1 repeat, a short verify-cost measurement",
    )
    parser.add_argument("--out", default=str(BENCH / "results"))
    parser.add_argument("--max-tokens", type=int, default=None, help="default 128 (quick: 32)")
    parser.add_argument("--repeats", type=int, default=None, help="default 3 (quick: 1)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--n-ctx", type=int, default=4096)
    parser.add_argument(
        "--draft-length",
        type=int,
        default=16,
        help="the request's draft_length: the adaptive schedule's cap",
    )
    parser.add_argument("--curve-repeats", type=int, default=None, help="default 7 (quick: 3)")
    parser.add_argument(
        "--hf-lookup-tokens",
        type=int,
        default=10,
        help="prompt_lookup_num_tokens for HF assisted generation",
    )
    parser.add_argument("--hf-cache", default=str(BENCH / ".cache" / "hf"))
    parser.add_argument("--gguf-cache", default=str(BENCH / ".cache" / "gguf"))
    parser.add_argument("--no-hf", action="store_true", help="skip the transformers systems")
    parser.add_argument(
        "--max-probe-interval",
        type=int,
        default=40,
        help="the probe-backoff variant's longest probe interval, in steps",
    )
    parser.add_argument(
        "--no-variants", action="store_true", help="skip the drafter/schedule settings section"
    )
    parser.add_argument(
        "--side-repeats",
        type=int,
        default=None,
        help="repeats of the settings section and the appendix (default 2; quick: 1)",
    )
    parser.add_argument(
        "--no-alt-quant",
        action="store_true",
        help="skip the appendix on requantized copies of the GGUF",
    )
    parser.add_argument("--workloads", default="open-ended,extraction,summary")
    parser.add_argument("--temperatures", default="greedy,t=0.7")
    parser.add_argument(
        "--database-url", default=os.environ.get("BENCH_DATABASE_URL", DEFAULT_DATABASE_URL)
    )
    parser.add_argument("--fresh-db", action="store_true", help="drop and recreate the database")
    parser.add_argument(
        "--max-load",
        type=float,
        default=0.7,
        help="wait until the 1-minute load average is below this",
    )
    parser.add_argument("--max-wait", type=float, default=600.0)
    parser.add_argument(
        "--max-foreign",
        type=float,
        default=0.12,
        help="measure a run again when other processes used more than this share of the CPU",
    )
    parser.add_argument("--retries", type=int, default=3)
    parser.add_argument("--no-profile", action="store_true")
    parser.add_argument("--tag", default="", help="suffix of the result files' names")
    parser.add_argument(
        "--render",
        metavar="JSON",
        help="only rewrite the .md and .png of an earlier run from its .json (adding the "
        "hand-written findings of <stem>.analysis.md, if present, to the .json)",
    )
    args = parser.parse_args(argv)
    if args.render:
        return render(Path(args.render))
    quick = args.quick
    max_tokens = args.max_tokens or (32 if quick else 128)
    repeats = args.repeats or (1 if quick else 3)
    args.side_repeats = args.side_repeats or (1 if quick else 2)
    args.curve_repeats = args.curve_repeats or (3 if quick else 7)
    chosen_workloads = args.workloads.split(",")
    chosen_temps = args.temperatures.split(",")
    systems = LLAMA_SYSTEMS + ([] if args.no_hf else HF_SYSTEMS)
    command = "python bench/speculative.py " + " ".join(sys.argv[1:] if argv is None else argv)
    wall_started = time.time()
    git = git_revision()  # the code this run loads, not whatever HEAD is when it ends

    print("PostgreSQL:", args.database_url, flush=True)
    postgres = setup_database(args.database_url, args.fresh_db)
    bench = Bench(args)
    hf_info = None
    if not args.no_hf:
        hf_info = bench.load_hf()
        print(f"transformers model loaded in {hf_info['load_s']} s", flush=True)

    print(f"waiting for the 1-minute load average to fall below {args.max_load}", flush=True)
    load = wait_for_quiet(args.max_load, 0 if quick else args.max_wait)
    if not quick:
        load["idle_wait_s"] = round(wait_until_idle(0.05, args.max_wait), 1)
    guard = Guard(args.max_foreign, 0 if quick else args.retries, args.max_wait)
    bench.guard = guard
    print(f"load average {load['before_run']}", flush=True)

    curve = bench.measure_curve()
    from decoding.engine.schedule import interpolated

    curve_fn = interpolated(curve)
    print("verify cost (ms):", {n: round(c * 1e3, 2) for n, c in curve.items()}, flush=True)
    positions = range(1, max(curve) + 1)
    best_n = max(positions, key=lambda n: n * curve_fn(1) / curve_fn(n))
    perfect = {"positions": best_n, "ratio": best_n * curve_fn(1) / curve_fn(best_n)}

    # Warm-up: each system once, untimed (first-call allocations, DB connection, torch init).
    # The short prompt: a long one's prefill would only cost time.
    warm_prompt = bench.prompts["open-ended"]
    for system in systems:
        for temperature in (0.0, 0.7):
            bench.run(system, warm_prompt, temperature, 8, 0, curve)

    runs = []
    cells = [(w, t) for w in chosen_workloads for t in chosen_temps]
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
                result = guard.measure(
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
    load_after = load_average()

    # Greedy exactness: Pathfinder (both sinks) and the loop against llama.cpp plain.
    exactness = []
    for workload in chosen_workloads:
        if "greedy" not in chosen_temps:
            continue
        by_system = defaultdict(list)
        for r in runs:
            if r["workload"] == workload and r["temperature"] == "greedy":
                by_system[r["system"]].append(r["tokens"])
        reference = by_system[PLAIN][0]
        for system in (LOOP, PF_AUDIT, PF_NOAUDIT, HF, HF_PLD):
            if system not in by_system:
                continue
            outputs = by_system[system]
            stable = all(o == outputs[0] for o in outputs)
            at = first_mismatch(reference, outputs[0])
            if at is None:
                exactness.append(
                    f"{workload}: {system} = llama.cpp plain, all "
                    f"{len(reference)} tokens identical"
                    f"{'' if stable else ' (but repeats differ among themselves)'}."
                )
                continue
            note = ""
            if system in (LOOP, *PF_SYSTEMS):
                tie = near_tie(bench, bench.prompts[workload], reference, outputs[0], at)
                tied = tie["gap"] is not None and abs(tie["gap"]) <= NEAR_TIE
                note = (
                    f" Single-token logits there: plain's pick {tie['reference_token']} "
                    f"{tie['logit_reference']:.3f}, {system}'s pick {tie['other_token']} "
                    f"{fmt(tie['logit_other'], '.3f')} (gap {fmt(tie['gap'], '.3f')}; "
                    f"top-2 gap {tie['top2_gap']:.3f}) — "
                    f"{'a near-tie' if tied else 'NOT a near-tie'} (threshold {NEAR_TIE})."
                )
            exactness.append(
                f"{workload}: {system} differs from llama.cpp plain from output "
                f"position {at} of {len(reference)} on.{note}"
            )

    profiles = {}
    if not args.no_profile:
        for workload, temp_label in (
            ("extraction", "greedy"),
            ("open-ended", "greedy"),
            ("extraction", "t=0.7"),
        ):
            if workload not in chosen_workloads or temp_label not in chosen_temps:
                continue
            profile = cProfile.Profile()
            r = bench.run_pathfinder(
                bench.prompts[workload],
                TEMPERATURES[temp_label],
                max_tokens,
                1000,
                audit=True,
                curve=curve,
                profile=profile,
            )
            profiles[f"{workload}, {temp_label}"] = profile_summary(profile, r)

    variants = None
    if not args.no_variants:
        variants = variants_section(bench, cells, max_tokens, args.side_repeats, curve)

    appendix = None
    if not args.no_alt_quant:
        alt_cells = [
            (w, "greedy")
            for w in ("extraction", "open-ended")
            if w in chosen_workloads and "greedy" in chosen_temps
        ]
        appendix = alt_quant_appendix(bench, alt_cells, max_tokens, args.side_repeats)

    # Every trail written in this run, checked link by link (batched by TrailSink).
    from audit.verification import verify_trails
    from decoding.sinks import BATCH_STEPS

    verification = verify_trails(bench.trails, scope="bench").as_dict()
    print(
        f"verify_trails: ok={verification['ok']} trails={verification['trails_checked']} "
        f"records={verification['records_checked']}",
        flush=True,
    )

    table = aggregate(runs, curve_fn)
    # Targets
    targets = []

    def target(label, key, field, threshold, above=True):
        row = table.get(key)
        if row is None or row.get(field) is None:
            return
        value = row[field]
        met = value >= threshold if above else value <= threshold
        shown = f"{100 * value:.1f}%" if field.startswith("audit") else f"{value:.2f}×"
        targets.append({"target": label, "measured": shown, "met": bool(met), "value": value})

    target(
        "extraction, greedy: Pathfinder+audit decode ≥ 2.0× llama.cpp plain",
        ("extraction", "greedy", PF_AUDIT),
        "decode_ratio_plain",
        2.0,
    )
    for t in chosen_temps:
        target(
            f"open-ended, {t}: Pathfinder+audit decode ≥ 0.95× llama.cpp plain",
            ("open-ended", t, PF_AUDIT),
            "decode_ratio_plain",
            0.95,
        )
    for w in chosen_workloads:
        for t in chosen_temps:
            row = table.get((w, t, PF_AUDIT))
            if row is None or row.get("audit_overhead") is None:
                continue
            delta, share = row["audit_overhead"], row["audit_ns_share"]
            targets.append(
                {
                    "target": f"{w}, {t}: audit overhead ≤ 5% of decode time (Δ vs no audit; "
                    "audit_ns / decode_ns)",
                    "measured": f"{100 * delta:.1f}%; {100 * share:.1f}%",
                    "met": bool(delta <= 0.05 and share <= 0.05),
                    "value": [delta, share],
                }
            )

    date = dt.datetime.now().strftime("%Y-%m-%d")
    stem = f"speculative-{date}{'-quick' if quick else ''}{args.tag}"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    report = {
        "date": dt.datetime.now().isoformat(timespec="seconds"),
        "command": command,
        "git": git,
        "model": str(bench.gguf),
        "quick": quick,
        "max_tokens": max_tokens,
        "repeats": repeats,
        "threads": args.threads,
        "draft_length": args.draft_length,
        "hf_lookup_tokens": args.hf_lookup_tokens,
        "machine": machine(),
        "postgres": postgres,
        "hf": hf_info,
        "load": load,
        "load_after": load_after,
        "foreign_cpu": {
            "median": median([r["foreign_cpu_share"] for r in runs]),
            "max": max(r["foreign_cpu_share"] for r in runs),
            "runs_over_10pct": sum(r["foreign_cpu_share"] > 0.10 for r in runs),
            "threshold": args.max_foreign,
            "remeasured": guard.retried,
            "waited_s": round(guard.waited_s, 1),
        },
        "wall_s": time.time() - wall_started,
        "curve_repeats": args.curve_repeats,
        "verify_cost": {str(n): c for n, c in curve.items()},
        "perfect_bound": perfect,
        "prompt_tokens": {w: len(p) for w, p in bench.prompts.items()},
        "targets": targets,
        "exactness": exactness,
        "verification": verification,
        "appendix": appendix,
        "variants": variants,
        "profiles": profiles,
        "pathfinder": {"ngrams": bench.ngrams, "batch_steps": BATCH_STEPS},
        "table": [dict(v) for v in table.values()],
        "runs": runs,
    }
    report["plot"] = write_plot(table, systems, out / f"{stem}.png")
    (out / f"{stem}.json").write_text(json.dumps(report, indent=1, default=str))
    (out / f"{stem}.md").write_text(markdown(report, table))
    print(markdown(report, table))
    print(f"wrote {out / stem}.{{md,json{',png' if report['plot'] else ''}}}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

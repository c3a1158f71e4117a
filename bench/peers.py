"""The systems the held-out benchmark runs side by side, each as a user would run it, greedy.

Every run returns the same figures: output tokens, prefill_ns (time to the first token for the
peers; the engine's prefill_ns for Pathfinder, which leaves the prompt's last token to the first
step), decode_ns and decode_tokens (the tokens after the first over the time after it for the
peers; every output token over decode_ns, which ends at the last record's commit, for
Pathfinder) and e2e_ns (the whole request).
"""

from __future__ import annotations

import contextlib
import gc
import time
import uuid
from pathlib import Path

from decoding.engine import AuditSink


class LlamaPeer:
    """llama-cpp-python's high-level Llama on one GGUF: plain Llama.generate from an empty cache,
    its own prompt lookup (LlamaPromptLookupDecoding) or its RAM prompt cache (set_cache)."""

    def __init__(self, path: Path, threads: int, n_ctx: int, *, lookup: int = 0, ram_cache=False):
        import llama_cpp
        from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

        draft = LlamaPromptLookupDecoding(num_pred_tokens=lookup) if lookup else None
        self.llama = llama_cpp.Llama(
            model_path=str(path), n_ctx=n_ctx, n_batch=512, n_threads=threads,
            n_threads_batch=threads, logits_all=bool(lookup), draft_model=draft, verbose=False,
        )  # fmt: skip
        self.ram_cache = ram_cache
        self.forget()
        self.eos = self.llama.token_eos()

    def forget(self) -> None:
        """A fresh process: an empty KV cache (and an empty RAM prompt cache, if it has one)."""
        import llama_cpp

        self.llama.reset()
        if self.ram_cache:
            self.llama.set_cache(llama_cpp.LlamaRAMCache(capacity_bytes=2 << 30))

    def run(self, prompt: list[int], max_tokens: int, *, cold: bool = True, **_) -> dict:
        if self.ram_cache:
            return self._completion(prompt, max_tokens)
        if cold:
            self.llama.reset()  # no prefix reuse: the prompt is evaluated from scratch
        out, first = [], None
        started = time.perf_counter_ns()
        generator = self.llama.generate(prompt, temp=0.0, top_k=0, top_p=1.0, min_p=0.0,
                                        typical_p=1.0, repeat_penalty=1.0, reset=cold)  # fmt: skip
        for token in generator:
            first = first or time.perf_counter_ns()
            out.append(int(token))
            if token == self.eos or len(out) >= max_tokens:
                break
        ended = time.perf_counter_ns()
        generator.close()
        return _figures(out, started, first, ended)

    def _completion(self, prompt: list[int], max_tokens: int) -> dict:
        # The RAM cache is consulted by create_completion (not by generate): as its users call it.
        started = time.perf_counter_ns()
        result = self.llama.create_completion(prompt, max_tokens=max_tokens, temperature=0.0,
                                              top_k=0, top_p=1.0, min_p=0.0,
                                              repeat_penalty=1.0)  # fmt: skip
        ended = time.perf_counter_ns()
        tokens = result["usage"]["completion_tokens"]
        return {"tokens": [], "completion_tokens": tokens, "prefill_ns": None,
                "decode_ns": None, "decode_tokens": None, "e2e_ns": ended - started}  # fmt: skip


class HFAssisted:
    """transformers' generate with prompt lookup (assisted generation), on the shipped GGUF
    dequantized to float32 by TransformersProvider's own conversion (cached once)."""

    def __init__(self, gguf: Path, cache: Path, threads: int, lookup: int) -> None:
        import torch
        from transformers import AutoModelForCausalLM

        from decoding.engine.providers.transformers_hf import TransformersProvider
        from decoding.engine.weights import weights_sha256

        torch.set_num_threads(threads)
        converted = cache / weights_sha256(gguf)
        if not converted.is_dir():  # the provider's own conversion, saved under cache/<sha>
            TransformersProvider(gguf, name="smollm2", cache_dir=cache)
            gc.collect()
        self.model = AutoModelForCausalLM.from_pretrained(
            converted, dtype=torch.float32, local_files_only=True
        ).eval()
        self.lookup = lookup
        self.eos = self.model.generation_config.eos_token_id

    def run(self, prompt: list[int], max_tokens: int, **_) -> dict:
        import torch
        from transformers.generation.streamers import BaseStreamer

        class FirstToken(BaseStreamer):
            seen_prompt, first = False, None

            def put(self, value):
                if self.seen_prompt and self.first is None:
                    self.first = time.perf_counter_ns()
                self.seen_prompt = True

            def end(self):
                pass

        streamer = FirstToken()
        ids = torch.tensor([prompt])
        with torch.inference_mode():
            started = time.perf_counter_ns()
            output = self.model.generate(
                input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_tokens,
                do_sample=False, prompt_lookup_num_tokens=self.lookup, eos_token_id=self.eos,
                pad_token_id=self.eos, streamer=streamer,
            )  # fmt: skip
            ended = time.perf_counter_ns()
        return _figures(output[0, len(prompt) :].tolist(), started, streamer.first, ended)


class NullSink(AuditSink):
    """The audit switched off: commits nothing, costs nothing (keeps the records in `kept`
    when given one, for a bench that looks at them afterwards)."""

    def __init__(self, kept: list | None = None) -> None:
        self._kept = kept

    def record(self, record) -> None:
        if self._kept is not None:
            self._kept.append(record)


class Pathfinder:
    """The engine as a worker runs a spec (the default): its models built through the same
    kinds (decoding.kinds) — the served file with its prompt cache, prompt lookup with the
    spec's n-grams over the context and the matter's earlier jobs — the match-driven schedule on
    the cost curve measured at load, its statistics carried from job to job, and the worker's
    audit sink into PostgreSQL (decoding.worker.sinks.sink_for; a trail opened and sealed per
    run)."""

    def __init__(self, spec, threads: int, n_ctx: int) -> None:
        from decoding.engine import MatchStatistics, measure_verify_cost
        from decoding.kinds.registry import DRAFTER_KINDS, PROVIDER_KINDS

        options = {**(spec.provider_settings or {}), "n_threads": threads, "n_ctx": n_ctx}
        kind = PROVIDER_KINDS[spec.provider]
        self.target = kind.build(spec.path, spec.revision, options, spec.name, draft=False)
        self.drafter = DRAFTER_KINDS[spec.drafter].build(spec, self.target)
        warm = self.target.tokenizer.encode(
            "The verify cost is measured once, when the model loads."
        )
        self.curve = measure_verify_cost(self.target, warm)
        self.draft_length = (spec.default_params or {}).get("draft_length", 16)
        self.statistics = MatchStatistics()
        self.references: list = []  # the session's earlier jobs (one matter)
        self.eos = self.target.tokenizer.eos_token_id

    def forget(self) -> None:
        """A new worker: no prompt cache, no references, no learnt acceptance."""
        from decoding.engine import MatchStatistics

        if self.target._prompts is not None:
            self.target._prompts = type(self.target._prompts)(self.target._prompts.capacity_bytes)
        self.target.logits([self.eos], 1)  # the KV cache holds nothing of any prompt
        self.references = []
        self.statistics = MatchStatistics()

    def run(self, prompt: list[int], max_tokens: int, *, audit: bool = True,
            stream: bool = False, stream_interval_ms: int | None = None,
            remember: bool = False, kept: list | None = None, **_) -> dict:  # fmt: skip
        import numpy as np

        from audit.store import trail_open, trail_seal
        from decoding.engine import (
            GenerationParams,
            GenerationRequest,
            MatchSchedule,
            Reference,
            SpeculativeDecoder,
        )  # fmt: skip
        from decoding.worker.sinks import sink_for

        started = time.perf_counter_ns()
        trail = trail_open(job_id=uuid.uuid4(), attempt=1) if audit else None
        params = GenerationParams(max_tokens=max_tokens, temperature=0.0, top_k=0, top_p=1.0,
                                  seed=1, draft_length=self.draft_length,
                                  eos_token_id=self.eos)  # fmt: skip
        commits = []
        # The sink a worker would use: batched, or for a stream each step committed (in the
        # background on PostgreSQL) and its reader told, here by counting the commit.
        committed = (lambda: commits.append(1)) if stream else None
        if audit:
            sinks = sink_for(trail.id, head=(0, trail.head_hash), salt=trail.salt,
                             committed=committed, interval_ms=stream_interval_ms)  # fmt: skip
        else:
            sinks = contextlib.nullcontext(NullSink(kept))
        with sinks as sink:
            decoder = SpeculativeDecoder(self.drafter, self.target, sink,
                                         tokenizer=self.target.tokenizer)  # fmt: skip
            result = decoder.generate(
                GenerationRequest(str(uuid.uuid4()), tuple(prompt), params),
                schedule=MatchSchedule(self.draft_length, self.curve, self.statistics),
                references=list(reversed(self.references)),
            )
        if trail is not None:
            trail_seal(trail_id=trail.id, outcome="succeeded")
        ended = time.perf_counter_ns()
        if remember:
            tokens = np.array([*prompt, *result.output_token_ids], dtype=np.int64)
            self.references.append(Reference(f"job-{len(self.references)}", tokens))
        return {
            "tokens": list(result.output_token_ids),
            "prefill_ns": result.prefill_ns,
            "decode_ns": result.decode_ns,
            "decode_tokens": len(result.output_token_ids),
            "e2e_ns": ended - started,
            "audit_ns": result.audit_ns,
            "cached_prompt_tokens": result.cached_prompt_tokens,
            "steps": result.steps,
            "drafted": result.drafted,
            "accepted": result.accepted,
            "stream_commits": len(commits),
        }


def _figures(out: list[int], started: int, first: int | None, ended: int) -> dict:
    first = first or ended
    return {
        "tokens": out,
        "prefill_ns": first - started,
        "decode_ns": ended - first,
        "decode_tokens": max(len(out) - 1, 0),
        "e2e_ns": ended - started,
    }

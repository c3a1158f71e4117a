"""The models a worker decodes with: loaded lazily, once per process, cached by spec.

A worker's first job on a spec pays the load (weights, hashes, the verify-cost measurement);
later jobs find the models warm. One job decodes at a time per process (Celery concurrency 1
per process), so the providers' KV caches are never shared between two running jobs.
"""

from __future__ import annotations

import atexit
import time
from dataclasses import dataclass, field

from django.conf import settings

from decoding.engine import (
    AdaptiveSchedule,
    Drafter,
    DraftModelDrafter,
    DraftSchedule,
    FixedSchedule,
    MatchSchedule,
    MatchStatistics,
    PromptLookupDrafter,
    Provider,
    StubProvider,
    Tokenizer,
    measure_verify_cost,
)
from decoding.model_specs import resolve_path
from decoding.models import ModelSpec


@dataclass
class LoadedModels:
    spec_name: str
    drafter: Drafter
    target: Provider
    tokenizer: Tokenizer | None
    # Seconds per verify of n positions, measured at load for an adaptive spec (else None).
    verify_cost: dict[int, float] | None
    # What copied drafts' acceptance by match length has been on this worker, job after job.
    match_statistics: MatchStatistics = field(default_factory=MatchStatistics)

    @property
    def drafts_from_references(self) -> bool:
        """Whether jobs may draft from the matter's earlier jobs: prompt lookup with an adaptive
        schedule. A fixed schedule is the reproducible mode, drafting from the context only, so
        a seed gives the same step structure, and so the same text, on any worker."""
        return bool(self.verify_cost) and isinstance(self.drafter, PromptLookupDrafter)

    def schedule(self, draft_length: int) -> DraftSchedule:
        """A fresh per-request schedule up to draft_length: driven by each copied draft's match
        for prompt lookup, by the acceptance so far for a draft model (both on the measured
        verify cost), or fixed at draft_length."""
        if not self.verify_cost:
            return FixedSchedule(draft_length)
        if isinstance(self.drafter, PromptLookupDrafter):
            return MatchSchedule(draft_length, self.verify_cost, self.match_statistics)
        return AdaptiveSchedule(draft_length, verify_cost=self.verify_cost)


_loaded: dict[tuple[int, object], LoadedModels] = {}


def models_for(spec: ModelSpec) -> tuple[LoadedModels, float]:
    """The spec's models and how long this call spent loading them (0 when warm), in ms."""
    key = (spec.pk, spec.updated_at)  # an edited spec is loaded afresh
    if key in _loaded:
        return _loaded[key], 0.0
    started = time.perf_counter()
    _loaded.clear()  # one spec resident per worker process; memory is the scarce resource
    _loaded[key] = _load(spec)
    return _loaded[key], (time.perf_counter() - started) * 1000


def tokenizer_for(spec: ModelSpec) -> Tokenizer | None:
    """The spec's tokenizer without the model (the web process tokenises prompts with it)."""
    if spec.provider == ModelSpec.Provider.STUB:
        return None
    return _tokenizer_only(spec.provider, spec.path)


_tokenizers: dict[tuple[str, str], Tokenizer] = {}


@atexit.register
def _release_models() -> None:
    # Free llama.cpp models while its bindings still exist (not during interpreter teardown).
    _loaded.clear()
    _tokenizers.clear()


def _tokenizer_only(provider: str, path: str) -> Tokenizer:
    key = (provider, path)
    if key not in _tokenizers:
        weights = resolve_path(path)
        if weights.suffix == ".gguf":
            # The vocabulary alone (no weights, no KV cache): cheap enough for every web process.
            # A transformers spec over a GGUF tokenises with the same GGUF vocabulary.
            import llama_cpp

            from decoding.engine.providers.llamacpp import LlamaCppTokenizer

            vocab_only = llama_cpp.Llama(model_path=str(weights), vocab_only=True, verbose=False)
            _tokenizers[key] = LlamaCppTokenizer(vocab_only)
        else:
            from transformers import AutoTokenizer

            from decoding.engine.providers.transformers_hf import HFTokenizer

            _tokenizers[key] = HFTokenizer(AutoTokenizer.from_pretrained(weights))
    return _tokenizers[key]


def _load(spec: ModelSpec) -> LoadedModels:
    target = _provider(spec.provider, spec.path, spec.revision, spec.provider_settings, spec.name)
    tokenizer = getattr(target, "tokenizer", None)
    draft_settings = spec.drafter_settings or {}
    if spec.drafter == ModelSpec.Drafter.PROMPT_LOOKUP:
        drafter: Drafter = PromptLookupDrafter(
            target.vocab_size,
            min_ngram=draft_settings.get("min_ngram", 1),
            max_ngram=draft_settings.get("max_ngram", 3),
        )
    else:
        draft = _provider(
            draft_settings.get("provider", spec.provider),
            draft_settings.get("path", ""),
            draft_settings.get("revision", ""),
            draft_settings.get("provider_settings", {}),
            f"{spec.name}/draft",
            draft=True,
        )
        drafter = DraftModelDrafter(draft)
    verify_cost = None
    if spec.draft_schedule == ModelSpec.Schedule.ADAPTIVE and spec.provider != "stub":
        warmup = tokenizer.encode("The verify cost is measured once, when the model loads.")
        verify_cost = measure_verify_cost(target, warmup)
    return LoadedModels(spec.name, drafter, target, tokenizer, verify_cost)


def _provider(kind, path, revision, options, name, *, draft=False) -> Provider:
    if kind == "stub":
        return StubProvider(
            vocab_size=settings.PATHFINDER_STUB_VOCAB_SIZE,
            seed=0,
            noise_seed=1 if draft else None,
            noise=settings.PATHFINDER_STUB_DRAFT_NOISE if draft else 0.0,
            name="stub-draft" if draft else "stub-target",
        )
    weights = resolve_path(path)
    if kind == "llamacpp":
        from decoding.engine.providers.llamacpp import LlamaCppProvider

        return LlamaCppProvider(
            weights,
            name=name,
            revision=revision,
            n_threads=options.get("n_threads", settings.PATHFINDER_LLAMA_THREADS),
            n_ctx=options.get("n_ctx", _context_size()),
            # The target's prefill is the one a review session repeats; a draft model's is
            # cheap beside it, so the memory goes to the target.
            prompt_cache_bytes=0 if draft else settings.PATHFINDER_PROMPT_CACHE_BYTES,
        )
    if kind == "remote":
        return _remote_provider(weights, revision, options, name)
    if kind == "transformers":
        from decoding.engine.providers.transformers_hf import TransformersProvider

        return TransformersProvider(
            weights, name=name, revision=revision, cache_dir=settings.PATHFINDER_MODEL_CACHE_DIR
        )
    raise ValueError(f"unknown provider {kind!r}")


def _remote_provider(weights, revision: str, options: dict, name: str) -> Provider:
    """A model on an OpenAI-compatible server; `path` names a local copy of its vocabulary
    (and, when it is the served file, its weights' SHA-256)."""
    from decoding.engine.providers.remote import RemoteProvider
    from decoding.engine.weights import component_hashes, weights_sha256

    return RemoteProvider(
        options["base_url"],
        tokenizer=_tokenizer_only("remote", str(weights)),
        name=name,
        model=options.get("model", ""),
        revision=revision,
        sha256=options.get("sha256") or (weights_sha256(weights) if weights.is_file() else ""),
        components=component_hashes(weights),
        top_logprobs=options.get("top_logprobs", 20),
        timeout_s=options.get("timeout_s", 30),
        retries=options.get("retries", 2),
    )


def _context_size() -> int:
    """Room for the longest prompt, the longest output and a full draft beyond it."""
    return (
        settings.PATHFINDER_MAX_PROMPT_TOKENS
        + settings.PATHFINDER_MAX_OUTPUT_TOKENS
        + settings.PATHFINDER_MAX_DRAFT_LENGTH
        + 1
    )


def vocab_size(spec: ModelSpec) -> int:
    tokenizer = tokenizer_for(spec)
    return tokenizer.vocab_size if tokenizer is not None else settings.PATHFINDER_STUB_VOCAB_SIZE

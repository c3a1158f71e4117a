"""Where Pathfinder's decode time goes: single Pathfinder+audit runs under cProfile, summed into
buckets by function (not timed runs: the profiler slows every call)."""

from __future__ import annotations

import cProfile
import io
import pstats
from collections import defaultdict

from bench.speculative_cells import TEMPERATURES
from bench.speculative_runner import Bench

PROFILE_BUCKETS = [
    # (label, file suffix, function name): cumulative time of that function
    ("prefill (drafter + target, the prompt)", "providers/llamacpp.py", "prefill"),
    (
        "llama.cpp _decode, prefill included (llama_decode + batch fill)",
        "providers/llamacpp.py",
        "_decode",
    ),
    ("logits copy out of llama.cpp", "providers/llamacpp.py", "logits_rows"),
    ("warp: softmax over the vocabulary (float64)", "engine/sampling.py", "warp"),
    ("verify rule (greedy)", "engine/rules.py", "verify_greedy"),
    ("verify rule (sampling)", "engine/rules.py", "verify_sampling"),
    ("drafter.propose (n-gram lookup + one-hot q)", "drafters/prompt_lookup.py", "propose"),
    ("token texts for the record", "engine/decoder.py", "_texts"),
    ("schedule (next_length + observe)", "engine/schedule.py", "next_length"),
    ("schedule observe", "engine/schedule.py", "observe"),
    # the decoder's sink.record and sink.flush calls, through StepStats (its file named here):
    # the engine's audit_ns
    ("audit: sink.record + sink.flush", "bench/speculative_runner.py", "record"),
    ("audit: sink.record + sink.flush", "bench/speculative_runner.py", "flush"),
    ("  StepRecord.payload()", "engine/records.py", "payload"),
    ("  canonical JSON", "audit/evidence/chain.py", "canonical_json"),
    ("  trail_append_many (one transaction per batch)", "audit/store.py", "trail_append_many"),
    ("  record hash", "audit/evidence/chain.py", "record_hash"),
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


def profile_runs(bench: Bench, chosen_workloads, chosen_temps, max_tokens: int, curve) -> dict:
    """The three cells the findings discuss, those of them this run measures."""
    profiles = {}
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
    return profiles

"""Pathfinder against the peers a user would pick, on held-out prompts only, in one run.

    .venv/bin/python bench/heldout.py [--out bench/results] [--quick]

Every prompt comes from bench/data/heldout/prompts.json (real legal texts and questions written
before the code they measure, never tuned against). Greedy, 2 threads, one process, the machine
guarded (bench/machine.py). Systems (bench/peers.py):

  plain (served)     llama-cpp-python Llama.generate on the file the default spec serves
  plain (Q4_1)       the same on the shipped Q4_1 file; each ratio is against the faster plain
  llama lookup       llama-cpp-python's own LlamaPromptLookupDecoding, on the served file
  hf lookup          transformers assisted generation (prompt lookup) on the GGUF in float32
  pathfinder+audit   the engine as the worker runs the default spec, records into PostgreSQL
  pathfinder         the same without the audit (NullSink)
  pathfinder stream  with the audit, streamed as a worker streams: the steps' records committed
                     beside the decoder, at most every PATHFINDER_STREAM_COMMIT_INTERVAL_MS
  pathfinder stream, each step   the same with every step committed on its own (interval 0)
  llama RAM cache    llama-cpp-python with set_cache(LlamaRAMCache()) (review session only)

Workloads: extraction (quote a clause), summary, open text: each prompt once per system from an
empty cache (a new worker for Pathfinder: no prompt cache, references or learnt acceptance);
and a review session: two documents, three questions each, interleaved, every system having
seen each document once before (an untimed question), timed end to end.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from bench.database import setup_database  # noqa: E402
from bench.machine import Guard, load_average, run_facts, save_results, wait_for_quiet  # noqa: E402

HELDOUT = ROOT / "bench" / "data" / "heldout"
DEFAULT_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/pathfinder_bench"
PLAIN_SERVED, PLAIN_SHIPPED = "plain (served)", "plain (Q4_1)"
LLAMA_LOOKUP, HF_LOOKUP = "llama lookup", "hf lookup"
PF_AUDIT, PF, PF_STREAM = "pathfinder+audit", "pathfinder", "pathfinder stream"
PF_STREAM_EACH = "pathfinder stream, each step"  # PATHFINDER_STREAM_COMMIT_INTERVAL_MS=0
PATHFINDER_SYSTEMS = (PF_AUDIT, PF, PF_STREAM, PF_STREAM_EACH)
RAM_SERVED, RAM_SHIPPED = "llama RAM cache (served)", "llama RAM cache (Q4_1)"
CELL_SYSTEMS = [PLAIN_SERVED, PLAIN_SHIPPED, LLAMA_LOOKUP, HF_LOOKUP, *PATHFINDER_SYSTEMS]


def prompts(tokenizer) -> dict:
    """Token ids of every held-out prompt, by workload, through the model's chat template."""
    from decoding.chat import render_chat

    data = json.loads((HELDOUT / "prompts.json").read_text())
    documents = {k: (HELDOUT / v).read_text() for k, v in data["documents"].items()}

    def special(token):
        return tokenizer.token_text(token) if token is not None else ""

    def chat(user: str, system: str | None) -> list[int]:
        messages = ([{"role": "system", "content": system}] if system else []) + [
            {"role": "user", "content": user}
        ]
        text = render_chat(tokenizer.chat_template, messages, bos=special(tokenizer.bos_token_id),
                           eos=special(tokenizer.eos_token_id))  # fmt: skip
        return tokenizer.encode(text, add_special=False)

    def asked(item):
        return chat(f"{documents[item['document']]}\n\n{item['question']}", data["system"])

    return {
        "extraction": [asked(item) for item in data["extraction"]],
        "summary": [asked(item) for item in data["summary"]],
        "open": [chat(text, None) for text in data["open"]],
        "session": [asked(item) for item in data["review_session"]["questions"]],
        "session_warmup": [
            asked({"document": name, "question": "In one sentence, what is this document?"})
            for name in data["documents"]
        ],
    }


def run_cells(systems: dict, workloads: dict, args, guard: Guard) -> list[dict]:
    """Every prompt on every system, `repeats` times, the order rotated from repeat to repeat
    (this machine's speed drifts by ±15% from run to run: medians over interleaved repeats).
    The slow peers (llama lookup, hf lookup) run once."""
    runs = []
    for workload in ("extraction", "summary", "open"):
        for index, prompt in enumerate(workloads[workload][: args.prompts]):
            for repeat in range(args.repeats):
                names = [n for n in CELL_SYSTEMS if n in systems]
                if repeat:
                    names = [n for n in names if n not in (LLAMA_LOOKUP, HF_LOOKUP)]
                shift = repeat % len(names)
                for name in names[shift:] + names[:shift]:
                    system = systems[name]
                    if name in PATHFINDER_SYSTEMS:
                        system.forget()
                    streams = name in (PF_STREAM, PF_STREAM_EACH)
                    each = 0 if name == PF_STREAM_EACH else None
                    options = {"audit": name != PF, "stream": streams, "stream_interval_ms": each}
                    result = guard.measure(
                        lambda s=system, p=prompt, o=options: s.run(p, args.max_tokens, **o)
                    )
                    result.update(workload=workload, prompt=index, system=name, repeat=repeat,
                                  prompt_tokens=len(prompt))  # fmt: skip
                    runs.append(result)
                    rate = result["decode_tokens"] / max(result["decode_ns"], 1) * 1e9
                    print(f"{workload}[{index}] {name} #{repeat}: prefill "
                          f"{result['prefill_ns'] / 1e6:.0f} ms, decode {rate:.1f} tok/s",
                          flush=True)  # fmt: skip
    return runs


def run_session(systems: dict, workloads: dict, args, guard: Guard) -> dict:
    """The review session on each system, `repeats` times in rotated order, each from a fresh
    process that then sees each document once (untimed) before the six timed questions."""
    names = [PF_AUDIT, RAM_SERVED, RAM_SHIPPED]
    totals: dict = {name: [] for name in names}
    last: dict = {}
    for repeat in range(args.repeats):
        shift = repeat % len(names)
        for name in names[shift:] + names[:shift]:
            system = systems[name]
            system.forget()
            for prompt in workloads["session_warmup"]:
                system.run(prompt, 16, remember=True)
            results = [
                guard.measure(lambda s=system, p=p: s.run(p, args.session_tokens, remember=True))
                for p in workloads["session"]
            ]
            totals[name].append(sum(r["e2e_ns"] for r in results) / 1e9)
            last[name] = results
            print(f"session {name} #{repeat}: {totals[name][-1]:.2f} s", flush=True)
    return {
        name: {
            "e2e_s": round(statistics.median(totals[name]), 3),
            "e2e_s_each": [round(t, 3) for t in totals[name]],
            "per_question_s": [round(r["e2e_ns"] / 1e9, 3) for r in last[name]],
            "cached_prompt_tokens": [r.get("cached_prompt_tokens") for r in last[name]],
            "max_foreign_cpu_share": round(max(r["foreign_cpu_share"] for r in last[name]), 4),
        }
        for name in names
    }


def medians(runs: list[dict]) -> dict:
    """Per (workload, prompt, system): the median of each timing over its repeats."""
    grouped: dict = {}
    for run in runs:
        grouped.setdefault((run["workload"], run["prompt"], run["system"]), []).append(run)
    out = {}
    for key, group in grouped.items():
        cell = dict(group[0])
        for field in ("prefill_ns", "decode_ns", "e2e_ns", "audit_ns"):
            if field in cell:
                cell[field] = statistics.median(r[field] for r in group)
        cell["repeats"] = len(group)
        out[key] = cell
    return out


def summarise(runs: list[dict], curve: dict) -> dict:
    by = medians(runs)
    table = {}
    for workload in ("extraction", "summary", "open"):
        indices = sorted({r["prompt"] for r in runs if r["workload"] == workload})
        rows = {}
        for name in CELL_SYSTEMS:
            cells = [by.get((workload, i, name)) for i in indices]
            if None in cells:
                continue
            ratios, prefill, e2e = [], [], []
            for i, cell in zip(indices, cells, strict=True):
                best = max(_rate(by[(workload, i, p)]) for p in (PLAIN_SERVED, PLAIN_SHIPPED))
                ratios.append(_rate(cell) / best)
                prefill.append((cell["prompt_tokens"] - 1) / (cell["prefill_ns"] / 1e9))
                e2e.append(cell["e2e_ns"] / 1e9)
            rows[name] = {
                "decode_ratio_median": round(statistics.median(ratios), 3),
                "decode_ratio_worst": round(min(ratios), 3),
                "decode_ratio_best": round(max(ratios), 3),
                "prefill_tok_s_median": round(statistics.median(prefill), 1),
                "e2e_s_median": round(statistics.median(e2e), 3),
            }
        audit, stream, stream_each, identical = [], [], [], []
        for i in indices:
            base = by[(workload, i, PF)]["decode_ns"]
            audit.append(by[(workload, i, PF_AUDIT)]["decode_ns"] / base - 1)
            stream.append(by[(workload, i, PF_STREAM)]["decode_ns"] / base - 1)
            stream_each.append(by[(workload, i, PF_STREAM_EACH)]["decode_ns"] / base - 1)
            identical.append(
                by[(workload, i, PF_AUDIT)]["tokens"] == by[(workload, i, PLAIN_SERVED)]["tokens"]
            )
        pf = [by[(workload, i, PF_AUDIT)] for i in indices]
        table[workload] = {
            "prompts": len(indices),
            "systems": rows,
            "audit_share_median": round(statistics.median(audit), 4),
            "audit_share_worst": round(max(audit), 4),
            "stream_audit_share_median": round(statistics.median(stream), 4),
            "stream_audit_share_worst": round(max(stream), 4),
            "stream_each_step_audit_share_median": round(statistics.median(stream_each), 4),
            "greedy_identical_to_plain": f"{sum(identical)} of {len(identical)}",
            "acceptance": round(
                sum(r["accepted"] for r in pf) / max(sum(r["drafted"] for r in pf), 1), 3
            ),
            "tokens_per_step": round(
                sum(r["decode_tokens"] for r in pf) / sum(r["steps"] for r in pf), 3
            ),
        }
    from decoding.engine.schedule import interpolated

    cost = interpolated(curve)
    best = max(curve, key=lambda n: n * cost(1) / cost(n))
    return {
        "cells": table,
        "ceiling": {"positions": best, "ratio": round(best * cost(1) / cost(best), 3)},
    }


def _rate(run: dict) -> float:
    return run["decode_tokens"] / (run["decode_ns"] / 1e9)


def markdown(report: dict) -> str:
    m = report["machine"]
    lines = [
        f"# Held-out benchmark ({report['date']})",
        "",
        f"`{report['command']}` at {report['revision']}; {m.get('cpu')} ({m.get('simd')}), "
        f"{m.get('cores')} cores, llama-cpp-python {m.get('llama_cpp_python')} built with "
        f"`{report['runtime_version']}`; served file {report['served']}; load average before "
        f"{report['load']['before_run'][0]:.2f}, after {report['load']['after'][0]:.2f}; "
        f"greedy, at most {report['max_tokens']} new tokens; prompts from bench/data/heldout only.",
        "",
        "Decode ratio: decode tok/s over the faster of plain (served) and plain (Q4_1), per prompt "
        "(median, worst, best over the prompts), each cell the median of "
        f"{report['repeats']} interleaved repeats (llama lookup and hf lookup: one run). Audit: "
        "decode time with the audit over without, same tokens.",
        "",
    ]
    for workload, cell in report["summary"]["cells"].items():
        lines += [f"## {workload} ({cell['prompts']} prompts)", "",
                  "| system | decode × best plain (median / worst / best) | prefill tok/s "
                  "| e2e s |",
                  "|---|---:|---:|---:|"]  # fmt: skip
        for name, row in cell["systems"].items():
            lines.append(
                f"| {name} | {row['decode_ratio_median']:.2f} / {row['decode_ratio_worst']:.2f} / "
                f"{row['decode_ratio_best']:.2f} | {row['prefill_tok_s_median']:.0f} | "
                f"{row['e2e_s_median']:.2f} |"
            )
        lines += [
            "",
            f"Pathfinder: acceptance {cell['acceptance']}, {cell['tokens_per_step']} tokens per "
            f"step; audit {100 * cell['audit_share_median']:.1f}% of decode (worst "
            f"{100 * cell['audit_share_worst']:.1f}%), streamed "
            f"{100 * cell['stream_audit_share_median']:.1f}% "
            f"(worst {100 * cell['stream_audit_share_worst']:.1f}%; committing each step "
            f"{100 * cell['stream_each_step_audit_share_median']:.1f}%); greedy output identical "
            f"to plain (served) on {cell['greedy_identical_to_plain']} prompts.",
            "",
        ]
    session = report["session"]
    base = min(session[RAM_SERVED]["e2e_s"], session[RAM_SHIPPED]["e2e_s"])
    lines += ["## review session (2 documents × 3 questions, interleaved, warm)", "",
              "| system | e2e s | × best llama RAM cache | cached prompt tokens per question |",
              "|---|---:|---:|---|"]  # fmt: skip
    for name, row in session.items():
        cached = ", ".join(str(c) for c in row["cached_prompt_tokens"] if c is not None) or "–"
        lines.append(f"| {name} | {row['e2e_s']:.2f} | {base / row['e2e_s']:.2f} | {cached} |")
    ceiling = report["summary"]["ceiling"]
    lines += [
        "",
        f"Verify-cost curve of the served file (ms): {report['curve_ms']}; ceiling "
        f"max n·c(1)/c(n) = {ceiling['ratio']} at n = {ceiling['positions']}.",
        "",
    ]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--session-tokens", type=int, default=64)
    parser.add_argument("--prompts", type=int, default=None, help="at most this many per workload")
    parser.add_argument("--repeats", type=int, default=3, help="interleaved repeats per cell")
    parser.add_argument(
        "--database-url", default=os.environ.get("BENCH_DATABASE_URL", DEFAULT_DATABASE_URL)
    )
    parser.add_argument("--max-load", type=float, default=0.7)
    parser.add_argument("--no-hf", action="store_true", help="leave out hf lookup")
    parser.add_argument("--quick", action="store_true", help="a smoke run; figures meaningless")
    args = parser.parse_args(argv)
    if args.quick:
        args.prompts, args.max_tokens, args.session_tokens, args.repeats = 1, 16, 8, 1
    postgres = setup_database(args.database_url, fresh=False)

    from django.conf import settings

    from bench.peers import HFAssisted, LlamaPeer, Pathfinder
    from decoding.engine.weights import default_gguf_path
    from decoding.kinds.files import default_model_file
    from decoding.models import ModelSpec

    load = wait_for_quiet(args.max_load, 600)
    guard = Guard(0.12, 3, 600)
    served, shipped = default_model_file(), default_gguf_path()
    spec = ModelSpec.objects.get(name="smollm2-135m-instruct")
    n_ctx = 4096
    pathfinder = Pathfinder(spec, args.threads, n_ctx)
    systems = {
        PLAIN_SERVED: LlamaPeer(served, args.threads, n_ctx),
        PLAIN_SHIPPED: LlamaPeer(shipped, args.threads, n_ctx),
        LLAMA_LOOKUP: LlamaPeer(served, args.threads, n_ctx, lookup=10),
        PF_AUDIT: pathfinder,
        PF: pathfinder,
        PF_STREAM: pathfinder,
        PF_STREAM_EACH: pathfinder,
        RAM_SERVED: LlamaPeer(served, args.threads, n_ctx, ram_cache=True),
        RAM_SHIPPED: LlamaPeer(shipped, args.threads, n_ctx, ram_cache=True),
    }
    if not args.no_hf:
        systems[HF_LOOKUP] = HFAssisted(shipped, ROOT / "bench" / ".cache" / "hf", args.threads, 10)
    workloads = prompts(pathfinder.target.tokenizer)
    runs = run_cells(systems, workloads, args, guard)
    session = run_session(systems, workloads, args, guard)
    load["after"] = load_average()
    report = {
        **run_facts("heldout.py"),
        "runtime_version": pathfinder.target.identity.runtime_version,
        "served": f"{served.name} (sha256 {pathfinder.target.identity.sha256[:12]}…)",
        "postgres": postgres,
        "load": load,
        "max_tokens": args.max_tokens,
        "repeats": args.repeats,
        "spec": {
            "drafter_settings": spec.drafter_settings,
            "default_params": spec.default_params,
            "prompt_cache_bytes": settings.PATHFINDER_PROMPT_CACHE_BYTES,
        },  # fmt: skip
        "curve_ms": {n: round(c * 1e3, 2) for n, c in pathfinder.curve.items()},
        "guard": {"retried": guard.retried, "waited_s": round(guard.waited_s, 1)},
        "summary": summarise(runs, pathfinder.curve),
        "session": session,
        "runs": [{k: v for k, v in r.items() if k != "tokens"} for r in runs],
    }
    text = markdown(report)
    if not args.quick:
        save_results(args.out, "heldout", report, text)
    print(text)
    return 0


if __name__ == "__main__":
    from decoding.engine.providers.model_thread import MODEL_THREAD

    # Every system evaluates on the thread Pathfinder's provider uses: a second evaluating thread
    # gives llama.cpp a second OpenMP team, and on 2 cores libgomp then throttles both teams'
    # spinning, which slowed every system here 1.5-2x (measured on 2026-12-03; model_thread.py).
    raise SystemExit(MODEL_THREAD.run(main))

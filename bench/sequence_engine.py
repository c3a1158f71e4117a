"""The sequence engine alone: N jobs decoded together in one process, without Django or the audit.

    .venv/bin/python bench/sequence_engine.py [--sizes 1,4,16] [--max-tokens 64] [--out DIR]

bench/throughput.py measures the deployed service; this isolates the engine
(decoding.engine.providers.llamacpp_sequences) and the draft schedule a worker gives each job, so
the gap between the service and the ceiling can be split into the engine's share and the rest.
For each N, on the same held-out prompts as bench/throughput.py (half greedy, half sampled), side
by side in one run:

- plain: llama.cpp decoding one token per call, one job after another (greedy);
- engine: N threads, each a SpeculativeDecoder on a slot of one SequenceEngine, prompt lookup with
  the worker's MatchSchedule priced on the pass it shares (records kept in memory);
- engine, single-sequence curve: the same, each schedule priced as if it were alone (the
  schedule before issue 21 item 3);
- ceiling: a bare multi-sequence loop, one token per sequence per pass, no speculation.

Reported per N: output tokens per second from the first prefill to the last token (prefills
included), each as a ratio to plain; for the engines, the mean sequences and positions per
decoding pass and the share of time in llama_decode.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.machine import load_average, run_facts, save_results, wait_for_quiet  # noqa: E402
from bench.throughput import ceiling, plain, prompt_tokens, served_file, workload  # noqa: E402

# The worker's schedule drafts up to this many tokens (the default spec's draft_length).
DRAFT_LENGTH = 16


def engine(
    path: str, bodies: list[dict], prompts: list[list[int]], max_tokens: int, batch_aware: bool
) -> dict:
    from decoding.engine import (
        GenerationParams,
        GenerationRequest,
        MatchSchedule,
        PromptLookupDrafter,
        SpeculativeDecoder,
        measure_verify_cost,
    )
    from decoding.engine.decoder import STEP_PARTS as PARTS
    from decoding.engine.decoder import AuditSink
    from decoding.engine.providers.llamacpp import LlamaCppProvider
    from decoding.engine.providers.llamacpp_sequences import SequenceEngine
    from decoding.engine.providers.model_thread import MODEL_THREAD
    from decoding.worker.runtime import CURVE_POSITIONS, curve_context

    class Kept(AuditSink):
        def __init__(self) -> None:
            self.records = []

        def record(self, record) -> None:
            self.records.append(record.payload())

    base = LlamaCppProvider(path, name="engine", n_threads=2, n_ctx=4096)
    curve = MODEL_THREAD.run(
        measure_verify_cost, base, curve_context(base.tokenizer), CURVE_POSITIONS
    )
    batch = SequenceEngine(base, sequences=len(prompts))
    passes: list[tuple[int, int, float]] = []
    batch.on_pass = lambda sequences, positions, seconds: passes.append(
        (sequences, positions, seconds)
    )
    results: list = [None] * len(prompts)

    def job(i: int) -> None:
        body = bodies[i]
        params = GenerationParams(
            max_tokens=max_tokens, temperature=body.get("temperature", 0.0),
            top_p=body.get("top_p", 1.0), seed=body["seed"], draft_length=DRAFT_LENGTH,
        )  # fmt: skip
        with batch.open() as sequence:
            neighbours = sequence.neighbours if batch_aware else None
            schedule = MatchSchedule(DRAFT_LENGTH, curve, neighbours=neighbours)
            decoder = SpeculativeDecoder(
                PromptLookupDrafter(base.vocab_size), sequence, Kept(), tokenizer=base.tokenizer
            )
            results[i] = decoder.generate(
                GenerationRequest(f"job-{i}", tuple(prompts[i]), params), schedule=schedule
            )

    started = time.perf_counter()
    threads = [threading.Thread(target=job, args=(i,)) for i in range(len(prompts))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    batch.close()
    tokens = sum(len(r.output_token_ids) for r in results)
    # The decoding passes, not the prefill chunks (one sequence's, longer than any verify).
    decoding = [p for p in passes if p[0] > 1 or p[1] <= DRAFT_LENGTH + 1]

    def mean(i: int) -> float | None:
        return round(statistics.mean(p[i] for p in decoding), 2) if decoding else None

    steps = sum(r.steps for r in results)
    parts = {part: sum(dict(r.parts_ns)[part] for r in results) / steps / 1e3 for part in PARTS}
    return {
        "elapsed_s": round(elapsed, 3), "tokens": tokens, "tok_s": round(tokens / elapsed, 2),
        "llama_decode_share": round(sum(p[2] for p in passes) / elapsed, 3),
        "sequences_per_pass": mean(0), "positions_per_pass": mean(1),
        "tokens_per_step": round(tokens / steps, 3),
        # Where a step's time went, in us (engine.decoder.STEP_PARTS), and the decoding passes'
        # llama_decode per step: the model part beyond it is the hand-over to the engine's
        # thread and, with neighbours, the wait for their requests.
        "parts_us_per_step": {part: round(us, 1) for part, us in parts.items()},
        "llama_decode_us_per_step": round(sum(p[2] for p in decoding) / steps * 1e6, 1),
    }  # fmt: skip


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1,4,16")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    parser.add_argument("--max-load", type=float, default=0.7)
    args = parser.parse_args(argv)
    sizes = [int(n) for n in args.sizes.split(",")]
    path = served_file()
    from decoding.engine.providers.llamacpp import LlamaCppProvider
    from decoding.engine.providers.model_thread import MODEL_THREAD

    tokenizer = LlamaCppProvider(path, name="tokenizer", n_ctx=64).tokenizer
    load = wait_for_quiet(args.max_load, 600)
    rows = []
    for n in sizes:
        bodies = workload(n, args.max_tokens)
        prompts = prompt_tokens(tokenizer, bodies)
        row = {"N": n, "load_before": load_average()}
        # Every system evaluates on the model thread, as the engine does: a second evaluating
        # thread gives llama.cpp a second OpenMP team, and on 2 cores libgomp then throttles
        # both (plain ran 4x slower after the engine had run, 2026-12-04; model_thread.py).
        row["plain"] = {
            k: v
            for k, v in MODEL_THREAD.run(plain, path, prompts, args.max_tokens, -1).items()
            if k != "outputs"
        }
        row["engine"] = engine(path, bodies, prompts, args.max_tokens, batch_aware=True)
        row["engine_single_curve"] = engine(
            path, bodies, prompts, args.max_tokens, batch_aware=False
        )
        row["ceiling"] = MODEL_THREAD.run(ceiling, path, prompts, args.max_tokens)
        rows.append(row)
        print(row, flush=True)
    report = {
        **run_facts("batch_engine.py"),
        "load": load,
        "max_tokens": args.max_tokens,
        "rows": rows,
    }
    report["load"]["after"] = load_average()
    text = markdown(report)
    save_results(args.out, "sequence-engine", report, text)  # batch-engine-*.md before issue 45
    print(text)
    return 0


def markdown(report: dict) -> str:
    m = report["machine"]
    lines = [
        f"# The sequence engine alone ({report['date']})",
        "",
        f"`{report['command']}` at {report['revision']}; {m['cpu']} ({m['simd']}), "
        f"{m['cores']} cores; load average before {report['load']['before_run']}, after "
        f"{report['load']['after']}. In one process, no Django, no audit: held-out prompts "
        "(bench/throughput.py's workload, half greedy, half sampled); tok/s from the first "
        "prefill to the last token, prefills included. Single-curve: each job's schedule "
        "priced as if it were alone.",
        "",
        "| N | plain tok/s | engine tok/s | engine × plain | single-curve × plain | "
        "ceiling × plain | engine × ceiling | sequences / positions per pass | "
        "single-curve | llama_decode share |",
        "|---:|---:|---:|---:|---:|---:|---:|---|---|---:|",
    ]
    for row in report["rows"]:
        base, eng = row["plain"]["tok_s"], row["engine"]
        single, top = row["engine_single_curve"], row["ceiling"]["tok_s"]
        cells = [
            row["N"], base, eng["tok_s"], f"{eng['tok_s'] / base:.2f}",
            f"{single['tok_s'] / base:.2f}", f"{top / base:.2f}", f"{eng['tok_s'] / top:.2f}",
            f"{eng['sequences_per_pass']} / {eng['positions_per_pass']}",
            f"{single['sequences_per_pass']} / {single['positions_per_pass']}",
            eng["llama_decode_share"],
        ]  # fmt: skip
        lines.append("| " + " | ".join(str(cell) for cell in cells) + " |")
    parts = list(report["rows"][0]["engine"]["parts_us_per_step"])
    lines += [
        "",
        "Where the engine's steps spent their time, us per step (engine.decoder.STEP_PARTS; "
        "`model` is the pass, waiting for the neighbours' requests included, and llama_decode "
        "the decoding passes' own time per step), beside plain llama.cpp's time per token "
        "after its prefills (one pass and an argmax on the float32 logits):",
        "",
        "| N | plain us/token | engine us/step | " + " | ".join(parts) + " | llama_decode |",
        "|---:|---:|---:|" + "---:|" * (len(parts) + 1),
    ]
    for row in report["rows"]:
        eng = row["engine"]
        per_step = eng["parts_us_per_step"]
        cells = [
            row["N"], round(1e6 / row["plain"]["decode_tok_s"], 1),
            round(sum(per_step.values()), 1), *(per_step[part] for part in parts),
            eng["llama_decode_us_per_step"],
        ]  # fmt: skip
        lines.append("| " + " | ".join(str(cell) for cell in cells) + " |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())

"""What the walls between matters cost (docs/adr/0024): prompt evaluation in a worker's batch
engine, at this revision and at a baseline revision without walls, side by side in one run.

    .venv/bin/python bench/walls.py [--baseline 1d8ae91] [--repeats 3] [--out bench/results]

The held-out review session (bench/data/heldout/prompts.json: two documents, three questions
each, interleaved as a reviewer works), rendered through the chat template, each question a
prompt evaluated on a slot of one SequenceEngine (the served file, the worker's prompt cache of
PATHFINDER_PROMPT_CACHE_BYTES' default) and its first logits taken, as a job's prefill does:

- one matter: every question asked by one matter. The walls should cost nothing here.
- two matters: every question asked by matter A, then again by matter B, one after the other.
  The documents are public text that two firms both read, so B's questions repeat A's
  prompts exactly. This is the walls' worst case: without them, B's prompts are served from
  A's saved states.

And decoding throughput, on bench/throughput.py's held-out jobs (questions about the documents
and open text, greedy and sampled in turn), eight decoded together on one engine with prompt
lookup, as a worker decodes them:

- decode, one matter: every job of one matter;
- decode, a matter each: every job of a matter of its own. The jobs that share a document no
  longer share its prefill.

Reported: seconds of prompt evaluation and cached prompt tokens per review workload, output
tokens per second per decode workload (prefills included), median over repeats, each revision
on a fresh engine; the ratio walls / no walls. The baseline is this script run in a git
worktree of `--baseline`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.machine import load_average, run_facts, save_results, wait_for_quiet  # noqa: E402
from bench.throughput import prompt_tokens, served_file, workload  # noqa: E402

PROMPT_CACHE_BYTES = 512 << 20  # the worker's default
DECODE_JOBS, DECODE_TOKENS, DRAFT_LENGTH = 8, 48, 8


def session_prompts(tokenizer) -> list[list[int]]:
    data = json.loads((ROOT / "bench" / "data" / "heldout" / "prompts.json").read_text())
    heldout = ROOT / "bench" / "data" / "heldout"
    documents = {k: (heldout / v).read_text() for k, v in data["documents"].items()}
    prompts = []
    for item in data["review_session"]["questions"]:
        user = f"{documents[item['document']][:6000]}\n\n{item['question']}"
        text = (
            f"<|im_start|>system\n{data['system']}<|im_end|>\n"
            f"<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n"
        )
        prompts.append(tokenizer.encode(text, add_special=False))
    return prompts


def open_slot(engine, wall):
    try:
        return engine.open(wall=wall)
    except TypeError:  # a baseline before the walls: one shared cache
        return engine.open()


def evaluate(engine, wall, prompt: list[int]) -> tuple[float, int]:
    """Seconds to evaluate the prompt and take its first logits; prompt tokens found cached."""
    with open_slot(engine, wall) as sequence:
        started = time.perf_counter()
        cached = sequence.prefill(prompt)
        sequence.logits(prompt, 1)
        return time.perf_counter() - started, cached


def decode(engine, walls: list[str], prompts: list[list[int]], bodies: list[dict]) -> dict:
    """The jobs decoded together, job i behind walls[i]: output tokens per second."""
    from decoding.engine import (
        FixedSchedule,
        GenerationParams,
        GenerationRequest,
        PromptLookupDrafter,
        SpeculativeDecoder,
    )
    from decoding.engine.decoder import AuditSink

    class Dropped(AuditSink):
        def record(self, record) -> None:
            record.payload()  # made, as a worker's sink makes it, and dropped

    outputs = [0] * len(prompts)

    def job(i: int) -> None:
        body = bodies[i]
        params = GenerationParams(
            max_tokens=DECODE_TOKENS, temperature=body.get("temperature", 0.0),
            top_p=body.get("top_p", 1.0), seed=body["seed"], draft_length=DRAFT_LENGTH,
        )  # fmt: skip
        with open_slot(engine, walls[i]) as sequence:
            decoder = SpeculativeDecoder(
                PromptLookupDrafter(engine.base.vocab_size), sequence, Dropped(),
                tokenizer=engine.base.tokenizer,
            )  # fmt: skip
            result = decoder.generate(
                GenerationRequest(f"job-{i}", tuple(prompts[i]), params),
                schedule=FixedSchedule(DRAFT_LENGTH),
            )
            outputs[i] = len(result.output_token_ids)

    started = time.perf_counter()
    threads = [threading.Thread(target=job, args=(i,)) for i in range(len(prompts))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    return {"seconds": elapsed, "tokens": sum(outputs), "tok_s": sum(outputs) / elapsed}


REVIEW = ("one matter", "two matters")
DECODE = ("decode, one matter", "decode, a matter each")


def measure(repeats: int) -> dict:
    from decoding.engine.providers.llamacpp import LlamaCppProvider
    from decoding.engine.providers.llamacpp_sequences import SequenceEngine

    path = served_file()
    results: dict[str, list[dict]] = {name: [] for name in (*REVIEW, *DECODE)}
    bodies = workload(DECODE_JOBS, DECODE_TOKENS)
    for _ in range(repeats):
        for name in results:
            base = LlamaCppProvider(
                path, name="walls", n_threads=2, n_ctx=4096, prompt_cache_bytes=PROMPT_CACHE_BYTES
            )
            engine = SequenceEngine(base, sequences=8)
            if name in DECODE:
                prompts = prompt_tokens(base.tokenizer, bodies)
                one = name == "decode, one matter"
                walls = ["a" if one else f"m{i}" for i in range(len(prompts))]
                results[name].append(decode(engine, walls, prompts, bodies))
                engine.close()
                continue
            prompts = session_prompts(base.tokenizer)
            walls = ["a"] if name == "one matter" else ["a", "b"]
            seconds, cached, tokens = 0.0, 0, 0
            for wall in walls:
                for prompt in prompts:
                    spent, found = evaluate(engine, wall, prompt)
                    seconds, cached, tokens = seconds + spent, cached + found, tokens + len(prompt)
            engine.close()
            results[name].append({"seconds": seconds, "cached": cached, "tokens": tokens})
    return {
        name: {
            **{key: statistics.median(r[key] for r in runs) for key in runs[0]},
            "runs": runs,
        }
        for name, runs in results.items()
    }


def baseline(revision: str, repeats: int) -> dict:
    """The same measurement in a worktree of `revision`, with this script copied in."""
    from bench.baseline import measure_at  # not in an older worktree, where this never runs

    return measure_at(revision, Path(__file__), ["--measure-only", "--repeats", str(repeats)])


def markdown(report: dict) -> str:
    lines = [
        "# The walls between matters: prompt evaluation, with and without",
        "",
        f"- date: {report['date']}; command: `{report['command']}`",
        f"- revision: {report['revision']} beside baseline {report['baseline']}",
        f"- machine: {report['machine']}",
        f"- load average before: {report['load_before']}, after: {report['load_after']}",
        "",
        "| workload | prompt tokens | no walls: s | cached | walls: s | cached | walls / none |",
        "|---|---|---|---|---|---|---|",
    ]
    for name in REVIEW:
        now, then = report["walls"][name], report["no_walls"][name]
        lines.append(
            f"| {name} | {now['tokens']:.0f} | {then['seconds']:.2f} | {then['cached']:.0f} | "
            f"{now['seconds']:.2f} | {now['cached']:.0f} | "
            f"{now['seconds'] / then['seconds']:.2f}x |"
        )
    lines += [
        "",
        f"Decoding {DECODE_JOBS} held-out jobs together, {DECODE_TOKENS} tokens at most each:",
        "",
        "| workload | output tokens | no walls: tok/s | walls: tok/s | walls / none |",
        "|---|---|---|---|---|",
    ]
    for name in DECODE:
        now, then = report["walls"][name], report["no_walls"][name]
        lines.append(
            f"| {name} | {now['tokens']:.0f} | {then['tok_s']:.1f} | {now['tok_s']:.1f} | "
            f"{now['tok_s'] / then['tok_s']:.2f}x |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--baseline", default="1d8ae91", help="a revision without the walls")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    parser.add_argument("--measure-only", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure_only:  # the baseline's worktree: the figures alone, as JSON
        print(json.dumps(measure(args.repeats)))
        return
    quiet = wait_for_quiet(0.5, 300)
    report = {**run_facts("walls.py"), "baseline": args.baseline, **quiet}
    report["load_before"] = load_average()
    report["no_walls"] = baseline(args.baseline, args.repeats)
    report["walls"] = measure(args.repeats)
    report["load_after"] = load_average()
    text = markdown(report)
    save_results(args.out, "walls", report, text)
    print(text)


if __name__ == "__main__":
    main()

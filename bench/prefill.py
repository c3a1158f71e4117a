"""Prefill of the served file, the installed llama.cpp against an earlier patch set's, interleaved.

    .venv/bin/python bench/prefill.py [--baseline-patch-set bi.48d6da6c066c] [--rounds 7]

Every held-out prompt (extraction, summary, open, the review session's questions: chat template,
bench/data/heldout) is evaluated from an empty cache in chunks of n_batch (512), logits for its
last position only, as the service's prefill does; 2 threads, llama-cpp-python's default context.
Each build runs in a child process (two libllama cannot share one), OPENBLAS_NUM_THREADS=1 in
both (numpy's idle BLAS threads otherwise take turns on the two cores); the parent alternates the
builds prompt by prompt, the order flipped every round, so the machine's drift falls on both
alike. Per prompt: the best of the rounds on each build, their ratio, and whether the last
position's logits are the same bits on both (a faster kernel must not change them: recorded
trails replay on it). The baseline is the wheel `make install` left in the wheelhouse for that
patch set (or --baseline-wheel).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.llama_builds import wheel_library, wheelhouse  # noqa: E402
from bench.machine import load_average, run_facts, save_results, wait_for_quiet  # noqa: E402

N_BATCH = 512


class Child:
    """One build, the served file loaded once; commands on stdin, answers on stdout."""

    def __init__(self, model: str, threads: int) -> None:
        import llama_cpp

        self.llama_cpp = llama_cpp
        self.llama = llama_cpp.Llama(
            model_path=model, n_ctx=4096, n_batch=N_BATCH, n_threads=threads, verbose=False
        )
        self.memory = llama_cpp.llama_get_memory(self.llama.ctx)
        self.batch = llama_cpp.llama_batch_init(N_BATCH, 0, 1)

    def prefill(self, tokens: list[int]) -> dict:
        import numpy as np

        from decoding.engine.providers.llamacpp import fill_batch

        self.llama_cpp.llama_memory_clear(self.memory, True)
        started = time.perf_counter()
        for offset in range(0, len(tokens), N_BATCH):
            part = tokens[offset : offset + N_BATCH]
            fill_batch(self.batch, part, offset, len(tokens) - 1)
            if self.llama_cpp.llama_decode(self.llama.ctx, self.batch) != 0:
                raise RuntimeError("llama_decode failed")
        seconds = time.perf_counter() - started
        last = self.llama_cpp.llama_get_logits_ith(self.llama.ctx, -1)
        logits = np.ctypeslib.as_array(last, shape=(self.llama.n_vocab(),)).tobytes()
        return {"seconds": seconds, "logits_sha256": hashlib.sha256(logits).hexdigest()}

    def serve(self) -> None:
        print(json.dumps({"version": self.llama_cpp.__version__}), flush=True)
        for line in sys.stdin:
            print(json.dumps(self.prefill(json.loads(line)["tokens"])), flush=True)


class Process:
    """A child on the installed llama.cpp, or on the library of another build (library)."""

    def __init__(self, model: Path, threads: int, library: Path | None) -> None:
        env = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}
        if library is not None:
            env["LLAMA_CPP_LIB_PATH"] = str(library)
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--child", "--model", str(model), "--threads", str(threads)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
        )  # fmt: skip
        self.version = json.loads(self.proc.stdout.readline())["version"]

    def prefill(self, tokens: list[int]) -> dict:
        self.proc.stdin.write(json.dumps({"tokens": tokens}) + "\n")
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


def baseline_wheel(patch_set: str) -> Path:
    house = wheelhouse(f"-{patch_set}")
    wheels = sorted(house.glob(f"llama_cpp_python-0.3.36+{patch_set}-*.whl"))
    if not wheels:
        raise SystemExit(f"no wheel of patch set {patch_set} in {house}: check out the revision "
                         "whose patches/llama.cpp it names and run make install there")  # fmt: skip
    return wheels[-1]


def workloads(model: Path) -> dict[str, list[int]]:
    import llama_cpp

    from bench.heldout import prompts
    from decoding.engine.providers.llamacpp import LlamaCppTokenizer

    llama = llama_cpp.Llama(model_path=str(model), n_ctx=64, vocab_only=True, verbose=False)
    every = prompts(LlamaCppTokenizer(llama))
    return {
        f"{kind} {n}": tokens
        for kind in ("extraction", "summary", "open", "session")
        for n, tokens in enumerate(every[kind])
    }


def measure(processes: dict, prompts: dict, rounds: int) -> dict:
    seconds = {name: {b: [] for b in processes} for name in prompts}
    digests = {name: {} for name in prompts}
    for r in range(rounds):
        for name, tokens in prompts.items():
            order = list(processes) if r % 2 == 0 else list(reversed(processes))
            for build in order:
                answer = processes[build].prefill(tokens)
                seconds[name][build].append(answer["seconds"])
                digests[name][build] = answer["logits_sha256"]
        print(f"  round {r + 1}/{rounds}", flush=True)
    rows = []
    for name, tokens in prompts.items():
        best = {b: min(v) for b, v in seconds[name].items()}
        rows.append({
            "prompt": name, "tokens": len(tokens),
            "tok_s": {b: round(len(tokens) / s, 1) for b, s in best.items()},
            "speedup": round(best["baseline"] / best["installed"], 3),
            "same_logits": len(set(digests[name].values())) == 1,
        })  # fmt: skip
    return {"rows": rows}


def markdown(report: dict) -> str:
    rows = report["measured"]["rows"]
    speedups = [row["speedup"] for row in rows]
    weighted = sum(r["tokens"] for r in rows)
    lines = [
        f"# Prefill, {report['installed']} against {report['baseline']}: {report['date']}",
        "",
        f"Command: `{report['command']}` at {report['revision']}.",
        f"Machine: {report['machine']['cpu']}, {report['machine']['cores']} cores, SIMD "
        f"{report['machine']['simd']}. Served file: {report['model']}.",
        f"Load average before {report['load']['before_run']}, after {report['load']['after']}.",
        f"{report['rounds']} interleaved rounds; each build's best round per prompt.",
        "",
        "| prompt | tokens | baseline tok/s | installed tok/s | speed-up | last logits same bits |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row['prompt']} | {row['tokens']} | {row['tok_s']['baseline']} | "
            f"{row['tok_s']['installed']} | {row['speedup']:.2f}x | "
            f"{'yes' if row['same_logits'] else '**no**'} |"
        )
    lines += [
        "",
        f"Speed-up: median {statistics.median(speedups):.2f}x, worst {min(speedups):.2f}x, best "
        f"{max(speedups):.2f}x over {len(rows)} prompts ({weighted} tokens). Same bits on "
        f"{sum(r['same_logits'] for r in rows)}/{len(rows)}.",
        "",
    ]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--baseline-patch-set", default="bi.48d6da6c066c")
    parser.add_argument("--baseline-wheel", type=Path, help="instead of the wheelhouse's")
    parser.add_argument("--model", type=Path, help="the GGUF (default: the default spec's file)")
    parser.add_argument("--max-load", type=float, default=0.7)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        Child(str(args.model), args.threads).serve()
        return 0
    from bench.verify_cost import served_file

    model = args.model or served_file()
    wheel = args.baseline_wheel or baseline_wheel(args.baseline_patch_set)
    prompts = workloads(model)
    load = wait_for_quiet(args.max_load, 600)
    with wheel_library(wheel) as library:
        processes = {
            "baseline": Process(model, args.threads, library),
            "installed": Process(model, args.threads, None),
        }
        try:
            measured = measure(processes, prompts, args.rounds)
        finally:
            for process in processes.values():
                process.close()
    load["after"] = load_average()
    report = {
        **run_facts("prefill.py"),
        "model": model.name,
        "installed": processes["installed"].version,
        "baseline": wheel.name.split("-")[1],  # the child names the Python package, not its library
        "load": load,
        "rounds": args.rounds,
        "measured": measured,
    }
    text = markdown(report)
    save_results(args.out, "prefill", report, text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

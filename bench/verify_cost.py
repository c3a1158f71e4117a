"""The verify-cost curve of the served file, patched llama.cpp against unpatched, interleaved.

    .venv/bin/python bench/verify_cost.py [--rounds 9] [--baseline-wheel W] [--out bench/results]

c(n) is the time one llama_decode takes to evaluate n new positions with logits for all n, as a
verify pass does, on top of a 600-token prefix of held-out text (bench/data/heldout), for n = 1..16;
2 threads, llama-cpp-python's default context (Llama(model_path, n_ctx, n_batch, n_threads)).
Beside it, for each build: prefill tok/s of the first held-out extraction prompt (chat template,
~870 tokens, from an empty cache), plain decoding tok/s (one token per call, greedy: what a user of
llama.cpp gets on this file) and, on every held-out prompt, the greedy tokens that plain decoding
gives, so the report says how many tokens the patch changed (near-ties only, expected few).

"patched" is the llama.cpp that `make install` put in .venv; "unpatched" is llama-cpp-python's
stock build of the same release with the same CMake flags, from --baseline-wheel or the wheelhouse
(see --help for the command that builds it). Two libllama cannot share a process: each build runs
in a child process that loads the file once, and the parent alternates them round by round (the
order flipped every round, n shuffled within a round), so the machine's drift falls on both alike.
Each child proves which library it loaded (the patch exports ggml_cpu_bi_mul_mat_applies).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.llama_builds import wheel_library, wheelhouse  # noqa: E402
from bench.machine import cpu_seconds, load_average, run_facts, save_results, wait_for_quiet  # noqa: E402

HELDOUT = ROOT / "bench" / "data" / "heldout"
POSITIONS = tuple(range(1, 17))
PREFIX = 600
GREEDY_TOKENS = 48
BUILDS = ("unpatched", "patched")


# -- the child: one build, one loaded model, commands on stdin ------------------------------------


class Child:
    def __init__(self, model: str, threads: int) -> None:
        import llama_cpp

        self.llama_cpp = llama_cpp
        self.llama = llama_cpp.Llama(
            model_path=model, n_ctx=4096, n_batch=512, n_threads=threads, verbose=False
        )
        self.ctx = self.llama.ctx
        self.memory = llama_cpp.llama_get_memory(self.ctx)
        self.batch = llama_cpp.llama_batch_init(512, 0, 1)
        text = (HELDOUT / "gpl-3.0.txt").read_text()
        self.text = self.llama.tokenize(text.encode())[: PREFIX + max(POSITIONS)]

    def patched(self) -> bool:
        import ctypes

        bundled = Path(self.llama_cpp.__file__).parent / "lib"
        library = Path(os.environ.get("LLAMA_CPP_LIB_PATH", bundled))
        cpu = ctypes.CDLL(str(library / "libggml-cpu.so"))
        return hasattr(cpu, "ggml_cpu_bi_mul_mat_applies")

    def decode(self, tokens, start: int, outputs: int) -> None:
        from decoding.engine.providers.llamacpp import fill_batch

        fill_batch(self.batch, tokens, start, start + len(tokens) - outputs)
        if self.llama_cpp.llama_decode(self.ctx, self.batch) != 0:
            raise RuntimeError("llama_decode failed")

    def prefill(self, tokens) -> float:
        self.llama_cpp.llama_memory_clear(self.memory, True)
        started = time.perf_counter()
        for offset in range(0, len(tokens), 512):
            part = tokens[offset : offset + 512]
            self.decode(part, offset, 1)
        return time.perf_counter() - started

    def curve(self, order) -> dict:
        costs = {}
        for n in order:
            self.llama_cpp.llama_memory_seq_rm(self.memory, 0, PREFIX, -1)
            started = time.perf_counter()
            self.decode(self.text[PREFIX : PREFIX + n], PREFIX, n)
            costs[n] = time.perf_counter() - started
        return costs

    def row(self, index: int):
        import numpy as np

        pointer = self.llama_cpp.llama_get_logits_ith(self.ctx, index)
        return np.ctypeslib.as_array(pointer, shape=(self.llama.n_vocab(),)).copy()

    def greedy(self, prompt, n: int) -> dict:
        """Plain decoding: the prompt, then one token per call, argmax each time; with each
        step's gap between its two largest logits."""
        import numpy as np

        self.prefill(prompt[:-1])  # the last prompt token is the first call's
        tokens, gaps, context = [], [], list(prompt)
        started = time.perf_counter()
        for _ in range(n):
            self.decode([context[-1]], len(context) - 1, 1)
            logits = self.row(0)
            token = int(np.argmax(logits))
            tokens.append(token)
            context.append(token)
            top_two = np.partition(logits, -2)[-2:]
            gaps.append(float(abs(top_two[1] - top_two[0])))
        return {"tokens": tokens, "gaps": gaps, "seconds": time.perf_counter() - started}

    def logits_digest(self, way: str) -> str:
        """SHA-256 of the logits of every position of the text's first 150 tokens, decoded one
        token per call ("sequential") or in one prefill chunk with every position's logits."""
        import hashlib

        import numpy as np

        tokens = self.text[:150]
        self.llama_cpp.llama_memory_clear(self.memory, True)
        rows = []
        if way == "sequential":
            for i, token in enumerate(tokens):
                self.decode([token], i, 1)
                rows.append(self.row(0))
        else:
            self.decode(tokens, 0, len(tokens))
            rows = [self.row(i) for i in range(len(tokens))]
        return hashlib.sha256(np.stack(rows).tobytes()).hexdigest()

    def serve(self) -> None:
        self.prefill(self.text[:PREFIX])
        warm = self.curve(POSITIONS)  # first-call allocations are no verify cost
        print(json.dumps({"ready": True, "patched": self.patched(), "warm": len(warm)}), flush=True)
        for line in sys.stdin:
            command = json.loads(line)
            if command["op"] == "curve":
                self.prefill(self.text[:PREFIX])
                answer = self.curve(command["order"])
            elif command["op"] == "prefill":
                answer = self.prefill(command["prompt"][:-1])
            elif command["op"] == "greedy":
                answer = self.greedy(command["prompt"], command["n"])
            elif command["op"] == "logits":
                answer = self.logits_digest(command["way"])
            else:
                raise SystemExit(f"unknown command {command}")
            own = os.times()
            print(json.dumps({"answer": answer, "cpu_s": own.user + own.system}), flush=True)


# -- the parent ------------------------------------------------------------------------------------


def baseline_wheel(given: Path | None) -> Path:
    if given:
        return given
    house = wheelhouse()
    wheels = sorted(house.glob("llama_cpp_python-0.3.36-*.whl"))
    if not wheels:
        raise SystemExit(
            f"no unpatched llama-cpp-python wheel in {house}; build it with\n"
            f"  .venv/bin/python scripts/llama_wheel.py --unpatched --version 0.3.36 "
            f'--wheelhouse {house} --cmake-args "$(python3 scripts/llama_build_flags.py --cmake)"'
        )
    return wheels[-1]


class Process:
    def __init__(self, build: str, model: Path, threads: int, library: Path | None) -> None:
        env = dict(os.environ)
        if library is not None:
            env["LLAMA_CPP_LIB_PATH"] = str(library)
        self.build = build
        self.cpu_s = 0.0
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--child", "--model", str(model), "--threads", str(threads)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
        )  # fmt: skip
        hello = json.loads(self.proc.stdout.readline())
        if hello["patched"] != (build == "patched"):
            raise SystemExit(f"the {build} child loaded the wrong library: {hello}")

    def ask(self, **command):
        self.proc.stdin.write(json.dumps(command) + "\n")
        self.proc.stdin.flush()
        reply = json.loads(self.proc.stdout.readline())
        self.cpu_s = reply["cpu_s"]
        return reply["answer"]

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


def heldout_prompts(model: Path) -> dict:
    import llama_cpp

    from bench.heldout import prompts
    from decoding.engine.providers.llamacpp import LlamaCppTokenizer

    llama = llama_cpp.Llama(model_path=str(model), n_ctx=64, vocab_only=True, verbose=False)
    return prompts(LlamaCppTokenizer(llama))


def measure(processes: dict, workloads: dict, rounds: int) -> dict:
    curves = {b: {n: [] for n in POSITIONS} for b in BUILDS}
    prefill = {b: [] for b in BUILDS}
    plain = {b: [] for b in BUILDS}
    first_extraction = workloads["extraction"][0]
    shuffler = random.Random(20)
    for r in range(rounds):
        order = list(BUILDS) if r % 2 == 0 else list(reversed(BUILDS))
        positions = list(POSITIONS)
        shuffler.shuffle(positions)
        for build in order:
            for n, seconds in processes[build].ask(op="curve", order=positions).items():
                curves[build][int(n)].append(seconds)
            prefill[build].append(processes[build].ask(op="prefill", prompt=first_extraction))
            run = processes[build].ask(op="greedy", prompt=first_extraction, n=GREEDY_TOKENS)
            plain[build].append(GREEDY_TOKENS / run["seconds"])
        done = {b: round(statistics.median(curves[b][1]) * 1e3, 2) for b in BUILDS}
        print(f"  round {r + 1}/{rounds}: c(1) ms {done}", flush=True)
    tokens = len(first_extraction) - 1
    return {
        "curve_ms": {
            b: {n: round(statistics.median(v) * 1e3, 3) for n, v in curves[b].items()}
            for b in BUILDS
        },
        "curve_spread_ms": {
            b: {n: [round(min(v) * 1e3, 2), round(max(v) * 1e3, 2)] for n, v in curves[b].items()}
            for b in BUILDS
        },
        "prefill_tokens": tokens,
        "prefill_tok_s": {b: round(tokens / statistics.median(v), 1) for b, v in prefill.items()},
        "plain_decode_tok_s": {b: round(statistics.median(v), 1) for b, v in plain.items()},
    }


def exactness(processes: dict, workloads: dict) -> list[dict]:
    """Per held-out prompt, plain greedy decoding on both builds: how many of the tokens differ,
    where the first does, and how close the two largest logits were there on each build."""
    rows = []
    for kind in ("extraction", "summary", "open"):
        for number, prompt in enumerate(workloads[kind]):
            runs = {
                b: processes[b].ask(op="greedy", prompt=prompt, n=GREEDY_TOKENS) for b in BUILDS
            }
            a, b = runs["unpatched"]["tokens"], runs["patched"]["tokens"]
            first = next((i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y), None)
            gaps = {} if first is None else {k: round(r["gaps"][first], 4) for k, r in runs.items()}
            rows.append({
                "prompt": f"{kind} {number}", "tokens": len(a),
                "differing": sum(x != y for x, y in zip(a, b, strict=True)),
                "first_difference": first, "top_two_gap_there": gaps,
            })  # fmt: skip
    return rows


def logits_digests(processes: dict) -> dict:
    """The logits of 150 positions, one token per call and in one chunk, on each build."""
    return {
        f"{build} {way}": processes[build].ask(op="logits", way=way)
        for build in BUILDS
        for way in ("sequential", "chunk")
    }


def ratios(curve: dict) -> dict:
    return {n: round(c / curve[1], 3) for n, c in curve.items()}


def markdown(report: dict) -> str:
    m = report["measured"]
    curve = m["curve_ms"]
    lines = [
        f"# Verify cost, patched vs unpatched llama.cpp: {report['date']}",
        "",
        f"Command: `{report['command']}` at {report['revision']}.",
        f"Machine: {report['machine']['cpu']}, {report['machine']['cores']} cores, SIMD "
        f"{report['machine']['simd']}. Served file: {report['model']}.",
        f"Builds: patched `{report['patched']}`, unpatched `{report['unpatched']}`.",
        f"Load average before {report['load']['before_run']}, after {report['load']['after']}; "
        f"other processes used {100 * report['foreign_cpu_share']:.1f}% of the CPU meanwhile.",
        f"{report['rounds']} interleaved rounds; medians (min-max in the JSON).",
        "",
        "| n | unpatched ms | c(n)/c(1) | patched ms | c(n)/c(1) | patched/unpatched |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    up, pa = ratios(curve["unpatched"]), ratios(curve["patched"])
    for n in POSITIONS:
        u, p = curve["unpatched"][n], curve["patched"][n]
        lines.append(f"| {n} | {u:.2f} | {up[n]:.2f} | {p:.2f} | {pa[n]:.2f} | {p / u:.2f} |")
    lines += [
        "",
        f"Prefill ({m['prefill_tokens']} tokens, empty cache): unpatched "
        f"{m['prefill_tok_s']['unpatched']} tok/s, patched {m['prefill_tok_s']['patched']} tok/s.",
        f"Plain decoding (one token per call, greedy): unpatched "
        f"{m['plain_decode_tok_s']['unpatched']} tok/s, patched "
        f"{m['plain_decode_tok_s']['patched']} tok/s.",
        "",
        "Greedy tokens of plain decoding, patched against unpatched, on every held-out prompt:",
        "",
        "| prompt | tokens | differing | first difference | top-two logit gap there, "
        "unpatched / patched |",
        "|---|---:|---:|---:|---:|",
    ]
    for row in report["exactness"]:
        first = "-" if row["first_difference"] is None else row["first_difference"]
        gaps = row["top_two_gap_there"]
        gap = f"{gaps['unpatched']} / {gaps['patched']}" if gaps else "-"
        lines.append(
            f"| {row['prompt']} | {row['tokens']} | {row['differing']} | {first} | {gap} |"
        )
    digests = report["logits_sha256"]
    reference = digests["unpatched sequential"]
    lines += [
        "",
        "Logits of 150 positions of held-out text (SHA-256 of the float32 array), one token per "
        "call and in one chunk:",
        "",
        "| build, way | SHA-256 (first 16) | equal to unpatched one token per call |",
        "|---|---|---|",
    ]
    for name, digest in digests.items():
        lines.append(f"| {name} | {digest[:16]} | {'yes' if digest == reference else 'no'} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--baseline-wheel", type=Path, help="the unpatched llama-cpp-python wheel")
    parser.add_argument("--model", type=Path, help="the GGUF (default: the default spec's file)")
    parser.add_argument("--max-load", type=float, default=0.7)
    parser.add_argument("--quick", action="store_true", help="a smoke run; figures meaningless")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        Child(str(args.model), args.threads).serve()
        return 0
    if args.quick:
        args.rounds = 1
    model = args.model or served_file()
    wheel = baseline_wheel(args.baseline_wheel)
    workloads = heldout_prompts(model)
    load = wait_for_quiet(args.max_load, 600)
    with wheel_library(wheel) as library:
        busy0, _ = cpu_seconds()
        processes = {
            "unpatched": Process("unpatched", model, args.threads, library),
            "patched": Process("patched", model, args.threads, None),
        }
        started = time.perf_counter()
        try:
            measured = measure(processes, workloads, args.rounds)
            exact = exactness(processes, workloads) if not args.quick else []
            digests = logits_digests(processes)
            wall = time.perf_counter() - started
            busy1, _ = cpu_seconds()
            children = sum(p.cpu_s for p in processes.values())
        finally:
            for process in processes.values():
                process.close()
    import llama_cpp

    foreign = max(0.0, (busy1 - busy0) - children) / (wall * (os.cpu_count() or 1))
    load["after"] = load_average()
    report = {
        **run_facts("verify_cost.py"),
        "model": model.name,
        "patched": llama_cpp.__version__,
        "unpatched": wheel.name,
        "load": load,
        "foreign_cpu_share": round(foreign, 4),
        "rounds": args.rounds,
        "measured": measured,
        "exactness": exact,
        "logits_sha256": digests,
    }
    text = markdown(report)
    if not args.quick:
        save_results(args.out, "verify-cost", report, text)
    print(text)
    return 0


def served_file() -> Path:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "pathfinder_site.settings")
    import django

    django.setup()
    from decoding.kinds.files import default_model_file

    return default_model_file()


if __name__ == "__main__":
    sys.exit(main())

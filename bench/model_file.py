"""Which GGUF to serve by default: speed and quality of the shipped Q4_1 and files made from it.

    .venv/bin/python bench/model_file.py [--out bench/results] [--quick]

Each candidate is the shipped SmolLM2-135M-Instruct Q4_1 file, or that file requantized by
llama.cpp's own quantizer exactly as the service makes its default (decoding.engine.model_files):
Q4_0, IQ4_NL, Q5_0 and Q8_0 (the types with llamafile's sgemm or CPU repacking for batches). All
run in this one process, 2 threads, on the held-out texts of bench/data/heldout (never used to
choose anything else):

- speed: prefill tok/s of the first held-out extraction prompt (chat template, ~870 tokens,
  from an empty KV cache), the verify-cost curve c(n) for n = 1..17 positions (as the worker
  measures it at load) and its ceiling max_n n*c(1)/c(n); all files are loaded at once and
  measured round-robin, median of 9 rounds, so the machine's drift falls on all alike;
- quality against the shipped file: greedy agreement (each held-out agreement prompt decoded
  48 tokens greedily, one position per llama_decode, by both files: the share of prompts whose
  48 tokens are identical, and the mean share of tokens before the first difference), and
  perplexity of the GNU GPL 3.0 text by llama-perplexity's method (consecutive chunks of 512
  tokens, each starting with BOS; the negative log-likelihood of each chunk's second half).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from bench.machine import Guard, load_average, run_facts, save_results, wait_for_quiet  # noqa: E402
from decoding.engine.schedule import interpolated  # noqa: E402

HELDOUT = ROOT / "bench" / "data" / "heldout"
CANDIDATES = ("Q4_1", "Q4_0", "IQ4_NL", "Q5_0", "Q8_0")
POSITIONS = (1, 2, 4, 8, 12, 16, 17)
AGREEMENT_TOKENS = 48
PERPLEXITY_CTX = 512


def heldout() -> dict:
    return json.loads((HELDOUT / "prompts.json").read_text())


def chat_prompt(tokenizer, system: str, user: str) -> list[int]:
    """The model's chat template around one user message, as the API renders `messages`."""
    from decoding.chat import render_chat

    def special(token):
        return tokenizer.token_text(token) if token is not None else ""

    messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
    text = render_chat(tokenizer.chat_template, messages, bos=special(tokenizer.bos_token_id),
                       eos=special(tokenizer.eos_token_id))  # fmt: skip
    return tokenizer.encode(text, add_special=False)


def extraction_prompt(tokenizer, data: dict) -> list[int]:
    item = data["extraction"][0]
    document = (HELDOUT / data["documents"][item["document"]]).read_text()
    return chat_prompt(tokenizer, data["system"], f"{document}\n\n{item['question']}")


def candidate_file(file_type: str, cache: Path) -> Path:
    from decoding.engine.model_files import requantized
    from decoding.engine.weights import SHIPPED_GGUF_TYPE, default_gguf_path

    shipped = default_gguf_path()
    if file_type == SHIPPED_GGUF_TYPE:
        return shipped
    return requantized(shipped, cache, file_type).path


def greedy(provider, prompt: list[int], n: int) -> list[int]:
    tokens = list(prompt)
    for _ in range(n):
        tokens.append(int(np.argmax(provider.logits(tokens, 1)[0])))
    return tokens[len(prompt) :]


def perplexity(provider, tokens: list[int], bos: int, chunks: int | None) -> float:
    """llama-perplexity's figure: exp(mean NLL of the second half of each 512-token chunk)."""
    nll, count = 0.0, 0
    first = PERPLEXITY_CTX // 2
    for start in range(0, len(tokens) - PERPLEXITY_CTX + 1, PERPLEXITY_CTX):
        if chunks is not None and start // PERPLEXITY_CTX >= chunks:
            break
        chunk = [bos, *tokens[start + 1 : start + PERPLEXITY_CTX]]
        # Rows score chunk[first:], each from the tokens before it.
        logits = provider.logits(chunk[:-1], PERPLEXITY_CTX - first).astype(np.float64)
        peak = logits.max(axis=1, keepdims=True)
        logz = np.log(np.exp(logits - peak).sum(axis=1)) + peak[:, 0]
        targets = np.array(chunk[first:])
        nll += float((logz - logits[np.arange(len(targets)), targets]).sum())
        count += len(targets)
    return math.exp(nll / count)


def speed(providers: dict, prompt: list[int], warm: list[int], args, guard: Guard) -> dict:
    """Prefill and verify costs of every file, measured round-robin (file after file, repeat
    after repeat) so that a drift in the machine's speed falls on all of them alike."""
    samples = {name: {"prefill": [], **{n: [] for n in POSITIONS}} for name in providers}
    context = list(warm)
    while len(context) <= POSITIONS[-1]:
        context += warm
    for provider in providers.values():  # warm-up: first-call allocations
        provider.logits(context, 1)
        provider.prefill(prompt)

    def once(provider) -> dict:
        times = {}
        for n in POSITIONS:
            provider.logits(context[:-n], 1)
            started = time.perf_counter_ns()
            provider.logits(context, n)
            times[n] = time.perf_counter_ns() - started
        provider.logits(context[:1], 1)  # the prompt leaves the KV cache
        started = time.perf_counter_ns()
        provider.prefill(prompt)
        times["prefill"] = time.perf_counter_ns() - started
        return times

    shares = {name: [] for name in providers}
    for _ in range(args.repeats):
        for name, provider in providers.items():
            measured = guard.measure(lambda provider=provider: once(provider))
            shares[name].append(measured.pop("foreign_cpu_share"))
            measured.pop("attempts")
            for key, value in measured.items():
                samples[name][key].append(value / 1e9)
    results = {}
    for name, sample in samples.items():
        curve = {n: statistics.median(sample[n]) for n in POSITIONS}
        cost = interpolated(curve)
        best = max(POSITIONS, key=lambda n: n * cost(1) / cost(n))
        results[name] = {
            "prefill_tok_s": round((len(prompt) - 1) / statistics.median(sample["prefill"]), 1),
            "verify_ms": {str(n): round(c * 1e3, 2) for n, c in curve.items()},
            "ceiling": {"positions": best, "ratio": round(best * cost(1) / cost(best), 2)},
            "max_foreign_cpu_share": round(max(shares[name]), 4),
        }
    return results


def quality(provider, data: dict, args) -> dict:
    tokenizer = provider.tokenizer
    outputs = [
        greedy(provider, tokenizer.encode(text), AGREEMENT_TOKENS)
        for text in data["agreement"][: args.agreement_prompts]
    ]
    text = (HELDOUT / data["perplexity_text"]).read_text()
    ppl = perplexity(provider, tokenizer.encode(text, add_special=False),
                     tokenizer.bos_token_id or 0, args.perplexity_chunks)  # fmt: skip
    return {"perplexity": round(ppl, 4), "outputs": outputs}


def agreement(outputs: list[list[int]], reference: list[list[int]]) -> dict:
    same = [a == b for a, b in zip(outputs, reference, strict=True)]
    prefix = []
    for a, b in zip(outputs, reference, strict=True):
        n = next((i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y), len(a))
        prefix.append(n / len(a))
    return {
        "prompts": len(same),
        "identical_share": round(sum(same) / len(same), 4),
        "mean_prefix_share": round(statistics.mean(prefix), 4),
        "worst_prefix_share": round(min(prefix), 4),
    }


def markdown(report: dict) -> str:
    lines = [
        f"# Default model file: speed and quality ({report['date']})",
        "",
        f"`{report['command']}` at {report['revision']}, on {report['machine'].get('cpu')} "
        f"({report['machine'].get('simd')}, {report['machine'].get('cores')} cores), "
        f"llama.cpp `{report['results'][0]['runtime_version']}`, {report['threads']} threads; "
        f"load average before {report['load']['before_run'][0]:.2f}, after "
        f"{report['load']['after'][0]:.2f}.",
        "",
        "| file | MiB | prefill tok/s | × Q4_1 | verify 1 pos ms | 16 pos ms | ceiling n·c(1)/c(n) "
        "| perplexity (GPL-3, 512-token chunks) | greedy 48 tokens identical "
        "| mean agreeing prefix |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    base = report["results"][0]
    for r in report["results"]:
        agree = r.get("agreement")
        lines.append(
            f"| {r['file_type']} | {r['file_mib']} | {r['prefill_tok_s']} | "
            f"{r['prefill_tok_s'] / base['prefill_tok_s']:.2f} | {r['verify_ms']['1']} | "
            f"{r['verify_ms']['16']} | {r['ceiling']['ratio']} (n={r['ceiling']['positions']}) | "
            f"{r['perplexity']} | "
            + (
                f"{agree['identical_share']:.0%} of {agree['prompts']} | "
                f"{agree['mean_prefix_share']:.0%} (worst {agree['worst_prefix_share']:.0%}) |"
                if agree
                else "reference | reference |"
            )  # fmt: skip
        )
    lines += [
        "",
        "Prefill: the first held-out extraction prompt "
        f"({base['prompt_tokens']} tokens) from an empty KV cache. Verify: one call scoring n new "
        "positions after a cached prefix. Each the median of "
        f"{report['repeats']} rounds, the files measured in turn within each round. "
        "Agreement: each file's greedy continuation of the held-out agreement prompts against "
        "the shipped file's. `bench/model_file.py` says how each figure is taken.",
        "",
    ]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=9, help="round-robin speed rounds")
    parser.add_argument("--agreement-prompts", type=int, default=None)
    parser.add_argument("--perplexity-chunks", type=int, default=None)
    parser.add_argument("--max-load", type=float, default=0.7)
    parser.add_argument("--quick", action="store_true", help="a smoke run; figures meaningless")
    args = parser.parse_args(argv)
    if args.quick:
        args.repeats, args.agreement_prompts = 1, 2
        args.perplexity_chunks = 1
    load = wait_for_quiet(args.max_load, 600)
    guard = Guard(0.12, 3, 600)
    data = heldout()
    cache = Path(tempfile.mkdtemp(prefix="pathfinder-model-file-"))
    from decoding.engine.providers.llamacpp import LlamaCppProvider

    providers = {
        name: LlamaCppProvider(
            candidate_file(name, cache), name=name, n_threads=args.threads, n_ctx=2048
        )  # fmt: skip
        for name in CANDIDATES
    }
    tokenizer = providers[CANDIDATES[0]].tokenizer
    prompt = extraction_prompt(tokenizer, data)
    warm = tokenizer.encode("The verify cost is measured once, when the model loads.")
    speeds = speed(providers, prompt, warm, args, guard)
    results, reference = [], None
    for name, provider in providers.items():
        identity = provider.identity
        result = {
            "file_type": name,
            "file": Path(candidate_file(name, cache)).name,
            "file_mib": round(candidate_file(name, cache).stat().st_size / 2**20, 1),
            "sha256": identity.sha256,
            "source_sha256": identity.source_sha256,
            "runtime_version": identity.runtime_version,
            "prompt_tokens": len(prompt),
            **speeds[name],
            **quality(provider, data, args),
        }
        if reference is None:
            reference = result["outputs"]
        else:
            result["agreement"] = agreement(result["outputs"], reference)
        results.append(result)
        print(json.dumps({k: v for k, v in result.items() if k != "outputs"}), flush=True)
    load["after"] = load_average()
    report = {
        **run_facts("model_file.py"),
        "threads": args.threads,
        "repeats": args.repeats,
        "load": load,
        "results": results,
    }
    if not args.quick:
        save_results(args.out, "model-file", report, markdown(report))
    print(markdown(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

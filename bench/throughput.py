"""Throughput of a batching worker: N concurrent jobs through the API, against the baselines.

    .venv/bin/python bench/throughput.py [--sizes 1,2,4,8,16] [--max-tokens 128] [--out DIR]

For each N, N jobs are submitted at once through POST /api/v1/generations (gunicorn, one Celery
worker, PostgreSQL, Redis, the audit on: the deployed service), half greedy and half sampled, on
held-out prompts of two workloads (bench/data/heldout: questions about a legal document, ~400
tokens after cutting the document, and open text, ~40 tokens), each to max_tokens new tokens. Side
by side in one run, on the same prompts:

- plain: llama.cpp decoding the served file one token per call, one job after another, in
  this process (what a user of llama.cpp alone gets);
- service, 1 sequence: the same stack with PATHFINDER_WORKER_SEQUENCES=1 (a prefork worker
  decoding one job at a time), the N jobs submitted at once;
- service, batching: PATHFINDER_WORKER_SEQUENCES=max(sizes), the N jobs decoded together;
- ceiling: a bare llama.cpp loop decoding the N prompts together, one token per sequence per
  pass, in KV streams of their own (no Django, no audit, no speculation).

Reported per N: tokens per second end to end (first submit to last job finished; the bare loops:
first prefill to last token) and as a ratio to plain; the ceiling's decode alone (its passes
after the prefills) over plain's (its calls after each prefill), the bound on what batching the
decode can gain here; the 95th percentile of each job's latency
(created to finished) over the same job's run alone on the same stack (after the sweep, every
job of the largest N is run by itself, one after another, on each stack: also a job alone with
batching on and off). A stack's prompt cache keeps what earlier jobs evaluated, as a deployed
worker's does, so a prompt seen at a smaller N (or alone) skips its prefill; plain and the
ceiling evaluate every prompt;
replays of the batched jobs (`manage.py replay`, alone, in one process) that came out
identical; greedy jobs whose tokens equal plain decoding's. The stacks run one after the other
on the same machine, the load average recorded before each.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.load import FINISHED, MODEL, Stack, wait_finished  # noqa: E402
from bench.machine import load_average, run_facts, save_results, wait_for_quiet  # noqa: E402

HELDOUT = ROOT / "bench" / "data" / "heldout"
DOCUMENT_CHARS = 1500  # each document cut, so that the largest batch's prompts fit in memory
SAMPLED = {"temperature": 0.8, "top_p": 0.95}


def workload(count: int, max_tokens: int) -> list[dict]:
    """`count` job bodies: held-out questions and open-text prompts in turn, greedy and sampled
    in turn (sampled jobs seeded by their index)."""
    data = json.loads((HELDOUT / "prompts.json").read_text())
    documents = {
        name: (HELDOUT / file).read_text()[:DOCUMENT_CHARS]
        for name, file in data["documents"].items()
    }
    asked = [
        [{"role": "system", "content": data["system"]},
         {"role": "user", "content": f"{documents[item['document']]}\n\n{item['question']}"}]
        for item in [*data["extraction"], *data["summary"]]
    ]  # fmt: skip
    chats = [messages for pair in zip(asked, ([{"role": "user", "content": text}]
             for text in data["open"]), strict=False) for messages in pair]  # fmt: skip
    bodies = []
    for i in range(count):
        body = {"model": MODEL, "messages": chats[i % len(chats)], "max_tokens": max_tokens,
                "seed": 100 + i}  # fmt: skip
        body.update(SAMPLED if i % 2 else {"temperature": 0})
        bodies.append(body)
    return bodies


# -- the service --------------------------------------------------------------------------------


def run_service(stack: Stack, key: str, bodies: list[dict]) -> dict:
    """Submit every body at once (each from its own thread), wait for all; timings and jobs.

    Times come from each job's own created_at and finished_at (this machine's clock), so the
    clients can poll gently: sixteen clients polling four times a second kept the web processes
    busy for 12 of the run's 60 CPU-seconds, on the cores llama.cpp's threads spin on (2026-12-04).
    """
    headers = {"Authorization": f"Bearer {key}"}
    jobs: list[dict | None] = [None] * len(bodies)
    barrier = threading.Barrier(len(bodies))

    def client(i: int) -> None:
        session = requests.Session()
        barrier.wait()
        response = session.post(f"{stack.base}/api/v1/generations", json=bodies[i],
                                headers=headers, timeout=60)  # fmt: skip
        response.raise_for_status()
        jobs[i] = wait_finished(session, stack.base, headers, response.json()["id"], every=1.0)

    started = time.time()
    threads = [threading.Thread(target=client, args=(i,)) for i in range(len(bodies))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    created = [_epoch(job["created_at"]) for job in jobs]
    finished = [_epoch(job["finished_at"]) for job in jobs]
    elapsed = max(finished) - started
    tokens = sum(len(job["output_token_ids"]) for job in jobs)
    return {
        "elapsed_s": round(elapsed, 3),
        "tokens": tokens,
        "tok_s": round(tokens / elapsed, 2),
        "latency_s": [round(end - begin, 3) for begin, end in zip(created, finished, strict=True)],
        "statuses": [job["status"] for job in jobs],
        "ids": [job["id"] for job in jobs],
        "outputs": [job["output_token_ids"] for job in jobs],
    }


def _epoch(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def run_alone(stack: Stack, key: str, bodies: list[dict]) -> dict:
    """Every body on its own, one after another: each job's latency alone (created to finished)
    and the tokens per second of the jobs' summed latencies."""
    headers = {"Authorization": f"Bearer {key}"}
    latencies, tokens = [], 0
    with requests.Session() as session:
        for body in bodies:
            response = session.post(f"{stack.base}/api/v1/generations", json=body,
                                    headers=headers, timeout=60)  # fmt: skip
            response.raise_for_status()
            job = wait_finished(session, stack.base, headers, response.json()["id"], every=0.25)
            latencies.append(_epoch(job["finished_at"]) - _epoch(job["created_at"]))
            tokens += len(job["output_token_ids"])
    return {"latency_s": [round(x, 3) for x in latencies], "tokens": tokens,
            "tok_s": round(tokens / sum(latencies), 2)}  # fmt: skip


def warm(stack: Stack, key: str) -> None:
    """One job loads the worker's model (and measures its verify-cost curve) before timing."""
    headers = {"Authorization": f"Bearer {key}"}
    body = {"model": MODEL, "prompt": "Hi", "max_tokens": 2}
    with requests.Session() as session:
        response = session.post(f"{stack.base}/api/v1/generations", headers=headers, json=body,
                                timeout=60)  # fmt: skip
        job = wait_finished(session, stack.base, headers, response.json()["id"], timeout=300)
    if job["status"] not in FINISHED:
        raise RuntimeError("the worker did not load its model in 300 s")


def replays_identical(stack: Stack, ids: list[str]) -> tuple[int, int]:
    done = subprocess.run([sys.executable, "manage.py", "replay", *ids], cwd=ROOT, env=stack.env,
                          capture_output=True, text=True)  # fmt: skip
    identical = sum("identical" in line and "not identical" not in line
                    for line in done.stdout.splitlines())  # fmt: skip
    return identical, len(ids)


# -- the bare llama.cpp baselines, in this process ------------------------------------------------


def prompt_tokens(tokenizer, bodies: list[dict]) -> list[list[int]]:
    from decoding.chat import render_chat

    def special(token):
        return tokenizer.token_text(token) if token is not None else ""

    rendered = [render_chat(tokenizer.chat_template, body["messages"],
                            bos=special(tokenizer.bos_token_id),
                            eos=special(tokenizer.eos_token_id)) for body in bodies]  # fmt: skip
    return [tokenizer.encode(text, add_special=False) for text in rendered]


def plain(path: str, prompts: list[list[int]], max_tokens: int, eos: int) -> dict:
    """llama.cpp one token per call, greedy, one prompt after another (sampling costs the same
    passes; greedy tokens are compared with the service's). A fresh provider for each N, so each
    N starts from an empty cache."""
    from decoding.engine.providers.llamacpp import LlamaCppProvider

    provider = LlamaCppProvider(path, name="plain", n_threads=2, n_ctx=4096)
    started = time.perf_counter()
    outputs, prefill_s = [], 0.0
    for prompt in prompts:
        prefilling = time.perf_counter()
        provider.prefill(prompt)
        prefill_s += time.perf_counter() - prefilling
        context, out = list(prompt), []
        while len(out) < max_tokens:
            token = int(provider.logits(context, 1)[0].argmax())
            out.append(token)
            context.append(token)
            if token == eos:
                break
        outputs.append(out)
    elapsed = time.perf_counter() - started
    tokens = sum(len(out) for out in outputs)
    decode_tok_s = tokens / (elapsed - prefill_s)
    return {"elapsed_s": round(elapsed, 3), "tokens": tokens, "tok_s": round(tokens / elapsed, 2),
            "decode_tok_s": round(decode_tok_s, 2), "outputs": outputs}  # fmt: skip


def ceiling(path: str, prompts: list[list[int]], max_tokens: int) -> dict:
    """Every prompt prefilled in a KV stream of its own, then max_tokens passes of one token per
    sequence (greedy, no end of sequence): the most a multi-sequence loop gets on this machine."""
    import ctypes

    import llama_cpp
    import numpy as np

    llama = llama_cpp.Llama(model_path=path, n_ctx=512, n_threads=2, verbose=False)
    params = llama_cpp.llama_context_params()
    ctypes.memmove(ctypes.byref(params), ctypes.byref(llama.context_params), ctypes.sizeof(params))
    n = len(prompts)
    params.n_seq_max, params.kv_unified = n, False
    params.n_ctx = n * (-(-(max(map(len, prompts)) + max_tokens + 1) // 256) * 256)
    params.n_batch = params.n_ubatch = 512
    ctx = llama_cpp.llama_init_from_model(llama.model, params)
    batch = llama_cpp.llama_batch_init(512, 0, 1)
    vocab = llama.n_vocab()

    def decode(entries) -> None:  # (sequence, tokens, start position)
        k = 0
        for seq, tokens, start in entries:
            for i, token in enumerate(tokens):
                batch.token[k], batch.pos[k], batch.n_seq_id[k] = token, start + i, 1
                batch.seq_id[k][0], batch.logits[k] = seq, i == len(tokens) - 1
                k += 1
        batch.n_tokens = k
        assert llama_cpp.llama_decode(ctx, batch) == 0

    started = time.perf_counter()
    last = []
    for seq, prompt in enumerate(prompts):
        for offset in range(0, len(prompt), 512):
            decode([(seq, prompt[offset : offset + 512], offset)])
        row = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(ctx, -1), shape=(vocab,))
        last.append(int(row.argmax()))
    prefilled = time.perf_counter()
    positions = [len(p) for p in prompts]
    for _ in range(max_tokens - 1):
        decode([(seq, [last[seq]], positions[seq]) for seq in range(n)])
        for seq in range(n):
            row = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(ctx, seq), shape=(vocab,))
            last[seq] = int(row.argmax())
            positions[seq] += 1
    elapsed = time.perf_counter() - started
    llama_cpp.llama_batch_free(batch)
    llama_cpp.llama_free(ctx)
    tokens = n * max_tokens
    # Decode alone: the tokens after each prompt's first over the passes of one token each.
    decode_tok_s = n * (max_tokens - 1) / (started + elapsed - prefilled)
    return {"elapsed_s": round(elapsed, 3), "tokens": tokens, "tok_s": round(tokens / elapsed, 2),
            "decode_tok_s": round(decode_tok_s, 2)}  # fmt: skip


# -- the run ------------------------------------------------------------------------------------


def served_file() -> str:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "pathfinder_site.settings")
    import django

    django.setup()
    from decoding.kinds.files import default_model_file

    return str(default_model_file())


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="1,2,4,8,16")
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = parser.parse_args(argv)
    sizes = [int(x) for x in args.sizes.split(",")]
    report = run_facts("throughput.py")
    report["quiet"] = wait_for_quiet(0.7, 600)
    path = served_file()
    import llama_cpp

    from decoding.engine.providers.llamacpp import LlamaCppTokenizer
    from decoding.engine.providers.model_thread import MODEL_THREAD

    tokenizer = LlamaCppTokenizer(llama_cpp.Llama(model_path=path, vocab_only=True, verbose=False))
    rows = {n: {"n": n} for n in sizes}
    for n in sizes:
        bodies = workload(n, args.max_tokens)
        prompts = prompt_tokens(tokenizer, bodies)
        rows[n]["prompt_tokens"] = [len(p) for p in prompts]
        print(f"N={n}: plain", flush=True)
        rows[n]["plain"] = plain(path, prompts, args.max_tokens, tokenizer.eos_token_id)
        print(f"N={n}: ceiling", flush=True)
        # On the model thread, as plain's provider evaluates: a second evaluating thread gives
        # llama.cpp a second OpenMP team, and on 2 cores libgomp then throttles both (the next
        # N's plain ran 1.3-4x slower after a ceiling on the main thread; model_thread.py).
        rows[n]["ceiling"] = MODEL_THREAD.run(ceiling, path, prompts, args.max_tokens)
    for label, sequences in (("service, 1 sequence", 1), ("service, batching", max(sizes))):
        with tempfile.TemporaryDirectory() as logs:
            stack = Stack(Path(logs), threads=2, workers=("w1",), sequences=sequences)
            try:
                key = stack.start()
                warm(stack, key)
                for n in sizes:
                    print(f"N={n}: {label}", flush=True)
                    rows[n].setdefault("load_before", {})[label] = load_average()
                    result = run_service(stack, key, workload(n, args.max_tokens))
                    if label == "service, batching":
                        result["replays"] = replays_identical(stack, result["ids"])
                    rows[n][label] = result
                # After the sweep, so that it does not fill the prompt cache the sweep finds.
                print(f"alone: {label}", flush=True)
                report.setdefault("alone", {})[label] = run_alone(
                    stack, key, workload(max(sizes), args.max_tokens)
                )
            finally:
                stack.stop()
    alone = report["alone"]
    report["alone_batching_on_x_off"] = round(
        alone["service, batching"]["tok_s"] / alone["service, 1 sequence"]["tok_s"], 3
    )
    report["rows"] = [_summary(rows[n], alone["service, batching"]) for n in sizes]
    report["raw"] = {str(n): rows[n] for n in sizes}
    text = markdown(report)
    save_results(args.out, "throughput", report, text)
    print(text)
    return 0


def _summary(row: dict, alone: dict) -> dict:
    base = row["plain"]["tok_s"]
    batched = row["service, batching"]
    single = row["service, 1 sequence"]
    # Each job's latency in the batch over the same job's alone (the same body, run by itself).
    slowdown = sorted(
        together / by_itself
        for together, by_itself in zip(batched["latency_s"], alone["latency_s"], strict=False)
    )
    greedy = [i for i in range(row["n"]) if i % 2 == 0]
    equal = sum(batched["outputs"][i] == row["plain"]["outputs"][i] for i in greedy)
    return {
        "n": row["n"],
        "plain_tok_s": base,
        "single_tok_s": single["tok_s"],
        "batching_tok_s": batched["tok_s"],
        "ceiling_tok_s": row["ceiling"]["tok_s"],
        "batching_x_plain": round(batched["tok_s"] / base, 2),
        "single_x_plain": round(single["tok_s"] / base, 2),
        "ceiling_x_plain": round(row["ceiling"]["tok_s"] / base, 2),
        "batching_x_ceiling": round(batched["tok_s"] / row["ceiling"]["tok_s"], 2),
        "ceiling_decode_x_plain_decode": round(
            row["ceiling"]["decode_tok_s"] / row["plain"]["decode_tok_s"], 2
        ),
        "p95_latency_x_alone": round(slowdown[math.ceil(0.95 * len(slowdown)) - 1], 2),
        "replays_identical": batched["replays"],
        "greedy_equal_plain": [equal, len(greedy)],
        "all_succeeded": all(s == "succeeded" for s in batched["statuses"] + single["statuses"]),
    }


def markdown(report: dict) -> str:
    m = report["machine"]
    lines = [
        f"# Throughput of a batching worker ({report['date']})",
        "",
        f"`{report['command']}` at {report['revision']}; {m['cpu']} ({m['simd']}), "
        f"{m['cores']} cores; load average before {report['quiet']['before_run']}. One worker "
        "(2 llama.cpp threads), gunicorn, PostgreSQL and Redis on this machine; jobs half greedy "
        "and half sampled on held-out prompts (questions about a legal document, open text).",
        "",
        "| N | plain tok/s | service, 1 seq | service, batching | ceiling | batching × plain "
        "| 1 seq × plain | ceiling × plain | batching × ceiling | p95 latency ÷ alone "
        "| replays identical | greedy = plain | ceiling × plain, decode alone |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|---:|",
    ]
    for r in report["rows"]:
        lines.append(
            f"| {r['n']} | {r['plain_tok_s']} | {r['single_tok_s']} | {r['batching_tok_s']} | "
            f"{r['ceiling_tok_s']} | {r['batching_x_plain']} | {r['single_x_plain']} | "
            f"{r['ceiling_x_plain']} | {r['batching_x_ceiling']} | {r['p95_latency_x_alone']} | "
            f"{r['replays_identical'][0]}/{r['replays_identical'][1]} | "
            f"{r['greedy_equal_plain'][0]}/{r['greedy_equal_plain'][1]} | "
            f"{r['ceiling_decode_x_plain_decode']} |"
        )
    lines += [
        "",
        "tok/s: output tokens of the N jobs over the wall time from the first submit to the last "
        "job finished (the bare loops: first prefill to last token), prefill included. plain and "
        "ceiling decode greedily without end of sequence in the ceiling; the service's jobs stop "
        "at end of sequence or max_tokens. p95 latency ÷ alone: the 95th percentile, over the N "
        "jobs, of each job's latency (created to finished) over the same job's run by itself on "
        "the same stack. Decode alone: the bare loops' tokens over their time outside prefills, "
        "the most decoding alone could gain on this machine (the service's prefills interleave "
        "with its steps, so it has no such figure).",
        "",
        "Alone (every job of the largest N run one after another, tokens over summed latencies): "
        f"batching worker {report['alone']['service, batching']['tok_s']} tok/s, one-at-a-time "
        f"worker {report['alone']['service, 1 sequence']['tok_s']} tok/s: batching on ÷ off "
        f"{report['alone_batching_on_x_off']}.",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())

"""Bulk review: documents x questions in one shuffled Batch API file, against llama.cpp run as a
user would, side by side in one run (issue 42, item 6).

    .venv/bin/python bench/bulk.py [--documents 12] [--questions 5] [--max-tokens 48]
        [--ways service,grouped,plain,ram,sorted] [--workers 1] [--prompt-cache-mib N]
        [--tag NAME] [--out bench/results]

The lines are held out: the documents are cuts of the three licences in bench/data/heldout
(about 1,400 characters each, no test or tuning uses them), each asked every question, and the
file is shuffled (seeded), as a review platform exports it. Greedy, `--max-tokens` each.

Ways, each from a fresh start (no way inherits another's cache):
  service   the file through /v1/files and /v1/batches on the deployed stack (gunicorn, one
            Celery worker decoding 8 jobs at once, PostgreSQL, Redis: bench/load.py's Stack),
            from create to completed, as configured (a document's lines side by side, one at a
            time: PATHFINDER_BATCH_DOCUMENT_LINES=1)
  grouped   the same with PATHFINDER_BATCH_DOCUMENT_LINES=4: up to four of a document's lines
            sent together and decoded in the same passes
  shared    the same with PATHFINDER_DOCUMENT_AFFINITY off: every line to the shared queue (what
            routing a document to one worker adds, with --workers 2)
  plain     llama-cpp-python (the same GGUF, 2 threads), each line from an empty cache, in file
            order: a client with no prefix reuse
  ram       llama-cpp-python with its RAM prompt cache (LlamaRAMCache), in file order
  sorted    llama-cpp-python with the lines sorted by document, each reusing the longest prefix
            its context holds: the careful client the issue names as the bar
With `--prompt-cache-mib N` the service's workers keep N MiB of prompts
(PATHFINDER_PROMPT_CACHE_BYTES), and the RAM cache way as much: a file of more documents than
the caches hold, as 50,000 lines over thousands of documents are, in a run of minutes. With
`--workers N` the stack runs N workers of `--threads` llama.cpp threads each, and
PATHFINDER_BATCH_MAX_QUEUED is N (a turn for each worker).
Reported: lines per minute, each way's ratio to sorted and plain, prompt tokens evaluated
against the unique prompt tokens (for the llama.cpp ways, counted from the prefix each reuses;
for the service, each line's prompt less the tokens its worker had cached, as its job records
them), the slowest line (for the service, from its job's start on a worker to its end: a
batch's lines all wait for its turns), and the load average before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path

import psycopg
import requests

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from bench.batch import batch_submit  # noqa: E402
from bench.load import MODEL, Stack  # noqa: E402
from bench.machine import load_average, run_facts, save_results, wait_for_quiet  # noqa: E402

HELDOUT = ROOT / "bench" / "data" / "heldout"
QUESTIONS = [
    "Does it grant or limit a patent licence?",
    "Does it disclaim warranties or limit liability?",
    "Does it say when the licence terminates?",
    "Does it require notices to be kept or given?",
    "Does it allow the work to be relicensed or sublicensed?",
    "Does it say which law governs it?",
    "Does it restrict the use of trademarks?",
]
DOCUMENT_CHARS = 1400
DOCUMENT_LINES = "PATHFINDER_BATCH_DOCUMENT_LINES"


def documents(count: int) -> list[str]:
    """`count` held-out documents: consecutive paragraphs of the licences, cut near
    DOCUMENT_CHARS each."""
    paragraphs = []
    for path in sorted(HELDOUT.glob("*.txt")):
        paragraphs += [" ".join(p.split()) for p in path.read_text().split("\n\n") if p.strip()]
    found, current = [], ""
    for paragraph in paragraphs:
        current = f"{current}\n{paragraph}" if current else paragraph
        if len(current) >= DOCUMENT_CHARS:
            found.append(current[:DOCUMENT_CHARS])
            current = ""
    if len(found) < count:
        raise SystemExit(f"the held-out texts make {len(found)} documents, not {count}")
    return found[:count]


def lines_for(count: int, questions: int, max_tokens: int) -> list[dict]:
    """Every document asked every question, shuffled: (custom_id, document, body) rows."""
    rows = []
    for d, document in enumerate(documents(count)):
        for q, question in enumerate(QUESTIONS[:questions]):
            prompt = (
                f"Document:\n{document}\n\nQuestion: {question} Answer yes or no, then quote "
                "the sentence that says so.\nAnswer:"
            )
            body = {"model": MODEL, "prompt": prompt, "max_tokens": max_tokens,
                    "temperature": 0, "seed": 1}  # fmt: skip
            rows.append({"custom_id": f"d{d}-q{q}", "document": d, "body": body})
    random.Random(2026).shuffle(rows)
    return rows


def run_service(rows: list[dict], threads: int, workers: int, env: dict) -> dict:
    """The shuffled file as one batch on a fresh stack, from create to completed."""
    with tempfile.TemporaryDirectory() as logs:
        names = tuple(f"w{n + 1}" for n in range(workers))
        stack = Stack(Path(logs), threads=threads, workers=names, sequences=8)
        stack.env.update({"PATHFINDER_BATCH_MAX_QUEUED": str(workers), **env})
        try:
            headers = {"Authorization": f"Bearer {stack.start()}"}
            base = stack.base
            started = time.monotonic()
            batch = batch_submit(base, headers, [row["body"] for row in rows])  # lines l0, l1, ..
            while batch["status"] not in ("completed", "failed", "expired", "cancelled"):
                time.sleep(0.25)
                batch = requests.get(f"{base}/v1/batches/{batch['id']}", headers=headers,
                                     timeout=30).json()  # fmt: skip
            seconds = time.monotonic() - started
            output = requests.get(f"{base}/v1/files/{batch['output_file_id']}/content",
                                  headers=headers, timeout=120).text.splitlines()  # fmt: skip
            evaluated, slowest = service_counts(stack.url)
        finally:
            stack.stop()
    answers = {
        rows[int(row["custom_id"][1:])]["custom_id"]: row["response"]["body"]["choices"][0]["text"]
        for row in map(json.loads, output)
    }
    return {"answered": len(answers), "seconds": seconds, "answers": answers,
            "evaluated": evaluated, "slowest_s": slowest}  # fmt: skip


def service_counts(database_url: str) -> tuple[int, float]:
    """(prompt tokens the workers evaluated, the slowest line's seconds on a worker), from the
    run's jobs: each prompt less the leading tokens its worker had cached."""
    with psycopg.connect(database_url) as db:
        evaluated, slowest = db.execute(
            "SELECT sum(jsonb_array_length(prompt_token_ids) - cached_prompt_tokens), "
            "max(extract(epoch FROM finished_at - started_at)) "
            "FROM decoding_generationjob WHERE status = 'succeeded'"
        ).fetchone()
    return int(evaluated), round(float(slowest), 2)


class Peer:
    """llama-cpp-python on the served GGUF, greedy, as a client of it would run it."""

    ram_bytes = 2 << 30  # the RAM cache's capacity

    def __init__(self, path: str, threads: int, *, ram_cache: bool = False):
        import llama_cpp

        self.llama = llama_cpp.Llama(model_path=path, n_ctx=4096, n_batch=512, n_threads=threads,
                                     n_threads_batch=threads, verbose=False)  # fmt: skip
        if ram_cache:
            self.llama.set_cache(llama_cpp.LlamaRAMCache(capacity_bytes=self.ram_bytes))
        self.ram_cache = ram_cache

    def tokens(self, text: str) -> list[int]:
        return self.llama.tokenize(text.encode(), add_bos=False, special=True)

    def answer(self, prompt: list[int], max_tokens: int, *, reuse: bool) -> tuple[str, int]:
        """(the answer, prompt tokens evaluated): from an empty context unless `reuse`, when
        llama-cpp-python keeps the longest prefix the context shares with the prompt."""
        if self.ram_cache:
            done = self.llama.create_completion(prompt, max_tokens=max_tokens, temperature=0.0)
            return done["choices"][0]["text"], -1
        held = list(self.llama._input_ids) if reuse else []
        if not reuse:
            self.llama.reset()
        shared = 0
        while shared < min(len(held), len(prompt) - 1) and held[shared] == prompt[shared]:
            shared += 1
        out = []
        greedy = dict(temp=0.0, top_k=0, top_p=1.0, min_p=0.0, typical_p=1.0, repeat_penalty=1.0)
        for token in self.llama.generate(prompt, reset=True, **greedy):
            if token == self.llama.token_eos():
                break
            out.append(int(token))
            if len(out) >= max_tokens:
                break
        return self.llama.detokenize(out).decode("utf-8", "replace"), len(prompt) - shared


def run_peer(rows: list[dict], path: str, threads: int, way: str) -> dict:
    peer = Peer(path, threads, ram_cache=way == "ram")
    order = sorted(rows, key=lambda r: (r["document"], r["custom_id"])) if way == "sorted" else rows
    answers, evaluated, slowest = {}, 0, 0.0
    started = time.monotonic()
    for row in order:
        began = time.monotonic()
        prompt = peer.tokens(row["body"]["prompt"])
        text, count = peer.answer(prompt, row["body"]["max_tokens"], reuse=way == "sorted")
        answers[row["custom_id"]] = text
        evaluated = evaluated + count if count >= 0 and evaluated is not None else None
        slowest = max(slowest, time.monotonic() - began)
    seconds = time.monotonic() - started
    return {"answered": len(answers), "seconds": seconds, "answers": answers,
            "evaluated": evaluated, "slowest_s": round(slowest, 2)}  # fmt: skip


def unique_prompt_tokens(rows: list[dict], peer: Peer) -> int:
    """The tokens of every document's longest shared prefix once, and each line's own rest."""
    by_document: dict[int, list[list[int]]] = {}
    for row in rows:
        by_document.setdefault(row["document"], []).append(peer.tokens(row["body"]["prompt"]))
    total = 0
    for prompts in by_document.values():
        shared = min(len(p) for p in prompts)
        while any(p[:shared] != prompts[0][:shared] for p in prompts):
            shared -= 1
        total += shared + sum(len(p) - shared for p in prompts)
    return total


def markdown(report: dict) -> str:
    rows = report["results"]
    by = {r["way"]: r for r in rows}
    lines = [
        f"# Bulk review: documents x questions as one shuffled batch ({report['date']})",
        "",
        f"Command: `{report['command']}`  ",
        f"Revision: {report['revision']}  ",
        f"Machine: {report['machine'].get('cpu')}, {report['machine'].get('cores')} cores "
        f"({report['machine'].get('simd')})  ",
        f"Load average before: {report['load_before'][0]:.2f}, after: "
        f"{report['load_after'][0]:.2f}  ",
        f"Lines: {report['documents']} held-out documents x {report['questions']} questions "
        f"= {report['lines']}, shuffled; greedy, {report['max_tokens']} tokens at most; "
        f"{report['unique_prompt_tokens']} unique prompt tokens. The service: "
        f"{report['workers']} worker(s) of {report['threads']} llama.cpp threads; the peers: "
        f"one process of {report['threads']} threads. Prompt caches: "
        f"{report['prompt_cache_mib'] or 'as configured (512'} MiB"
        f"{'' if report['prompt_cache_mib'] else ' for the service, 2048 for ram)'}.",
        "",
        "| way | answered | seconds | lines/min | vs sorted | vs plain | prompt tokens "
        "evaluated / unique | slowest line (s) | answers equal to plain |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        ratio = {
            name: f"{r['lines_per_minute'] / by[name]['lines_per_minute']:.2f}x"
            if name in by
            else "-"
            for name in ("sorted", "plain")
        }
        evaluated = (
            f"{r['evaluated'] / report['unique_prompt_tokens']:.2f}"
            if r["evaluated"] is not None
            else "not counted"
        )
        lines.append(
            f"| {r['way']} | {r['answered']}/{report['lines']} | {r['seconds']:.1f} | "
            f"{r['lines_per_minute']:.1f} | {ratio['sorted']} | {ratio['plain']} | {evaluated} | "
            f"{r['slowest_s'] if r['slowest_s'] is not None else '-'} | {r['same_as_plain']} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--documents", type=int, default=12)
    parser.add_argument("--questions", type=int, default=5)
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--threads", type=int, default=2, help="llama.cpp threads")
    parser.add_argument("--workers", type=int, default=1, help="the service's Celery workers")
    parser.add_argument("--prompt-cache-mib", type=int, help="the prompt caches' size")
    parser.add_argument("--ways", default="service,grouped,plain,ram,sorted")
    parser.add_argument("--tag", default="", help="names the results: bulk-TAG-DATE.md")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = parser.parse_args()
    quiet = wait_for_quiet(threshold=0.5, max_wait=120)
    rows = lines_for(args.documents, args.questions, args.max_tokens)
    from bench.throughput import served_file

    path = served_file()
    cache = {}
    if args.prompt_cache_mib:
        cache = {"PATHFINDER_PROMPT_CACHE_BYTES": str(args.prompt_cache_mib << 20)}
        Peer.ram_bytes = args.prompt_cache_mib << 20
    ways = {
        "service": lambda: run_service(rows, args.threads, args.workers, cache),
        "grouped": lambda: run_service(
            rows, args.threads, args.workers, {**cache, DOCUMENT_LINES: "4"}
        ),
        "shared": lambda: run_service(
            rows, args.threads, args.workers, {**cache, "PATHFINDER_DOCUMENT_AFFINITY": "false"}
        ),
        "plain": lambda: run_peer(rows, path, args.threads, "plain"),
        "ram": lambda: run_peer(rows, path, args.threads, "ram"),
        "sorted": lambda: run_peer(rows, path, args.threads, "sorted"),
    }
    names = {"grouped": "service, 4 lines a turn", "shared": "service, shared queue only"}
    before, results = load_average(), []
    for way in args.ways.split(","):
        result = ways[way]()
        result["way"] = names.get(way, way)
        result["lines_per_minute"] = result["answered"] / result["seconds"] * 60
        results.append(result)
        print(json.dumps({k: v for k, v in result.items() if k != "answers"}), flush=True)
    after = load_average()
    plain = next((r["answers"] for r in results if r["way"] == "plain"), None)
    for result in results:
        same = sum(plain.get(c) == a for c, a in result.pop("answers").items()) if plain else None
        result["same_as_plain"] = f"{same}/{len(rows)}" if same is not None else "-"
    report = {
        **run_facts("bulk.py"),
        "documents": args.documents,
        "questions": args.questions,
        "lines": len(rows),
        "max_tokens": args.max_tokens,
        "workers": args.workers,
        "threads": args.threads,
        "prompt_cache_mib": args.prompt_cache_mib,
        "unique_prompt_tokens": unique_prompt_tokens(rows, Peer(path, args.threads)),
        "quiet": quiet,
        "load_before": before,
        "load_after": after,
        "results": results,
    }
    text = markdown(report)
    print(text)
    save_results(args.out, f"bulk-{args.tag}" if args.tag else "bulk", report, text)


if __name__ == "__main__":
    main()

"""What finding a trail by its words costs on a large store: the portal's search (PostgreSQL
full-text over the prompt and answer, through the indexed vector of migration decoding 0014)
beside the plain substring search a user would otherwise write (every word ILIKE'd in both texts:
what the embedded SQLite does), side by side on the same rows, one page of the trails list each:

    .venv/bin/python bench/search_scale.py [--jobs 200000] [--repeats 7] [--reuse]
        [--out bench/results]

The rows are synthetic job rows of one matter: prompts and answers built from a fixed vocabulary
by a seeded generator, with a few marker words at known rates (one row in 10, 1,000 and
100,000). The queries were chosen before any timing: a rare word, a common one, a phrase, two
words, a word nobody used. Each is the trails list's own selector (reviewers.selectors.job_list,
a page of 50 rows and no count), timed `--repeats` times; median and worst are reported, and the
rows each finds are compared between the two ways (the stemmed search finds a superset).

The database is `pathfinder_bench_search` on the local PostgreSQL. Results:
bench/results/search-scale-<date>.{json,md}.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.database import setup_database  # noqa: E402
from bench.machine import load_average, run_facts, save_results  # noqa: E402

URL = "postgres://postgres@127.0.0.1:5432/pathfinder_bench_search"
MATTER = "Bench v. Search"
BATCH = 5000
VOCABULARY = (
    "agreement",
    "party",
    "tenant",
    "landlord",
    "clause",
    "lease",
    "term",
    "notice",
    "payment",
    "breach",
    "remedy",
    "court",
    "hearing",
    "counsel",
    "witness",
    "exhibit",
    "record",
    "statement",
    "evidence",
    "contract",
    "liability",
    "damages",
    "obligation",
    "warranty",
    "property",
    "premises",
    "schedule",
    "invoice",
    "amount",
    "delivery",
    "goods",
    "services",
    "termination",
    "renewal",
    "dispute",
    "arbitration",
    "jurisdiction",
    "section",
    "paragraph",
    "summary",
    "quote",
    "confidential",
    "information",
    "employee",
    "employer",
    "policy",
    "claim",
    "insurance",
    "coverage",
    "period",
)
# Marker words and the share of rows that hold one (in the prompt or the answer).
MARKERS = {"indemnification": 10, "escrow": 1_000, "subrogation": 100_000}
QUERIES = {
    "a rare word (1 in 100,000 rows)": "subrogation",
    "an uncommon word (1 in 1,000)": "escrow",
    "a common word (1 in 10)": "indemnification",
    "two words": "escrow tenant",
    "a phrase": '"breach of the lease"',
    "a word nobody used": "photosynthesis",
}


def _text(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(VOCABULARY) for _ in range(words)).capitalize() + "."


def build(jobs: int) -> dict:
    from django.db import transaction

    from decoding.models import GenerationJob, Matter, ModelSpec

    rng = random.Random(13)
    matter, _ = Matter.objects.get_or_create(name=MATTER)
    spec = ModelSpec.objects.get(name="stub")
    started = time.perf_counter()
    marked = dict.fromkeys(MARKERS, 0)
    for first in range(0, jobs, BATCH):
        rows = []
        for n in range(first, min(first + BATCH, jobs)):
            prompt = "Quote the clause: " + _text(rng, 40)
            answer = _text(rng, 30)
            if n % 7 == 0:
                answer += " It is a breach of the lease."
            for word, every in MARKERS.items():
                if n % every == every // 2:
                    answer += f" See {word}."
                    marked[word] += 1
            rows.append(
                GenerationJob(
                    id=uuid.UUID(int=rng.getrandbits(128), version=4),
                    matter=matter,
                    model_spec=spec,
                    status=GenerationJob.Status.SUCCEEDED,
                    prompt_text=prompt,
                    prompt_token_ids=[1],
                    output_text=answer,
                    max_tokens=16,
                    temperature=0.0,
                    top_k=0,
                    top_p=1.0,
                    seed=0,
                    draft_length=0,
                )
            )
        with transaction.atomic():
            GenerationJob.objects.bulk_create(rows, batch_size=BATCH)
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("ANALYZE decoding_generationjob")
    return {"jobs": jobs, "marked": marked, "build_s": round(time.perf_counter() - started, 1)}


def _substring(text: str):
    """The search a user would write without full-text: every word, ILIKE'd in both texts."""
    from django.db.models import Q

    query = Q()
    for word in text.replace('"', "").split():
        query &= Q(prompt_text__icontains=word) | Q(output_text__icontains=word)
    return query


def measure(reviewer, repeats: int) -> dict:
    from decoding.models import GenerationJob
    from reviewers import search, selectors

    results = {}
    for label, text in QUERIES.items():
        timings = {"portal (full-text index)": [], "substring (ILIKE scan)": []}
        found = {}
        for _ in range(repeats):
            started = time.perf_counter()
            page = selectors.job_list(user=reviewer, filters=selectors.JobFilters(q=text))
            timings["portal (full-text index)"].append((time.perf_counter() - started) * 1000)
            found["portal (full-text index)"] = {job.id for job in page.rows}
            started = time.perf_counter()
            ids = list(
                GenerationJob.objects.filter(matter__grants__user=reviewer)
                .filter(_substring(text))
                .order_by("-created_at", "-id")
                .values_list("id", flat=True)[:51]
            )
            timings["substring (ILIKE scan)"].append((time.perf_counter() - started) * 1000)
            found["substring (ILIKE scan)"] = set(ids[:50])
        full, plain = found.values()
        results[label] = {
            "query": text,
            **{
                way: {
                    "median_ms": round(statistics.median(values), 1),
                    "worst_ms": round(max(values), 1),
                }
                for way, values in timings.items()
            },
            "rows_on_page": {way: len(rows) for way, rows in found.items()},
            "substring_rows_also_found": len(plain & full) == len(plain) or len(full) == 50,
        }
        results[label]["speedup"] = round(
            results[label]["substring (ILIKE scan)"]["median_ms"]
            / max(results[label]["portal (full-text index)"]["median_ms"], 0.01),
            1,
        )
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            f"EXPLAIN SELECT id FROM decoding_generationjob WHERE {search.MATCH}", ["escrow"]
        )
        results["plan (uncommon word)"] = [row[0] for row in cursor.fetchall()]
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=200_000)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--reuse", action="store_true", help="keep an earlier run's rows")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = parser.parse_args()
    report = run_facts("search_scale.py")
    report["load_before"] = load_average()
    report["postgres"] = setup_database(URL, fresh=not args.reuse)

    from django.contrib.auth import get_user_model

    from decoding.models import GenerationJob, Matter
    from reviewers.models import MatterGrant

    if GenerationJob.objects.exists():
        report["rows"] = {"jobs": GenerationJob.objects.count(), "reused": True}
    else:
        print(f"building {args.jobs} job rows ...", flush=True)
        report["rows"] = build(args.jobs)
    reviewer, _ = get_user_model().objects.get_or_create(username="bench-reviewer")
    MatterGrant.objects.get_or_create(user=reviewer, matter=Matter.objects.get(name=MATTER))
    report["queries"] = measure(reviewer, args.repeats)
    report["load_after"] = load_average()
    save_results(args.out, "search-scale", report, _markdown(report, args))


def _markdown(report: dict, args) -> str:
    lines = [
        f"# Finding a trail by its words, {report['rows']['jobs']:,} job rows",
        "",
        f"`{report['command']}` at {report['revision']}; {report['machine']['cpu']}, "
        f"{report['machine']['cores']} cores; load {report['load_before']} before, "
        f"{report['load_after']} after.",
        "",
        "One page (50 rows, no count) of the trails list's own selector per query; median (worst) "
        f"of {args.repeats}. Portal: PostgreSQL full-text over the indexed vector. Baseline: "
        "every word ILIKE'd in the prompt and the answer, as a user without full-text would do.",
        "",
        "| query | portal ms | substring ms | portal faster by | rows on page (portal / ILIKE) |",
        "|---|---|---|---|---|",
    ]
    for label, result in report["queries"].items():
        if not isinstance(result, dict):
            continue
        portal, plain = result["portal (full-text index)"], result["substring (ILIKE scan)"]
        rows = result["rows_on_page"]
        lines.append(
            f"| {label}: `{result['query']}` | {portal['median_ms']} ({portal['worst_ms']}) | "
            f"{plain['median_ms']} ({plain['worst_ms']}) | {result['speedup']}x | "
            f"{rows['portal (full-text index)']} / {rows['substring (ILIKE scan)']} |"
        )
    lines += ["", "Plan of the uncommon word's match:", "", "```"]
    lines += report["queries"]["plan (uncommon word)"] + ["```", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    main()

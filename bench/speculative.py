"""Speculative decoding benchmark: Pathfinder against llama.cpp and HF transformers, in one run.

    .venv/bin/python bench/speculative.py [--quick] [--out bench/results]

Everything runs side by side in this one process, on the same GGUF (the default
SmolLM2-135M-Instruct Q4_1), with the same prompts (rendered through the model's chat
template), and every figure is a ratio to llama.cpp plain decoding measured in the same run
(ARCHITECTURE.md, "Performance contract"). bench/README.md says what each column means.

Systems
  llama.cpp plain      llama-cpp-python's own loop: Llama.generate, temp 0 (greedy) or 0.7
  llama.cpp loop       the engine's LlamaCppProvider, one position per llama_decode, argmax or
                       a draw from the warped distribution: Pathfinder without speculation
  pathfinder+audit     SpeculativeDecoder as the worker runs it: PromptLookupDrafter with the
                       default spec's n-gram settings (min 3, max 3; read from the migrated
                       database), AdaptiveSchedule on the verify cost curve measured at load,
                       the real TrailSink into PostgreSQL (records of STEPS_PER_COMMIT steps per
                       transaction, the last batch committed before generate() returns), a
                       trail opened and sealed per run
  pathfinder, no audit the same, with a sink that does nothing
  hf greedy/sample     transformers model.generate on the GGUF dequantized to float32
  hf prompt lookup     the same with prompt_lookup_num_tokens (HF assisted generation)
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never the model hub
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from bench.database import setup_database  # noqa: E402
from bench.machine import (  # noqa: E402
    Guard,
    git_revision,
    load_average,
    machine,
    wait_for_quiet,
    wait_until_idle,
)
from bench.speculative_analysis import (  # noqa: E402
    aggregate,
    check_targets,
    median,
    perfect_bound,
)
from bench.speculative_cells import HF_SYSTEMS, LLAMA_SYSTEMS, SYSTEMS  # noqa: E402
from bench.speculative_exactness import greedy_exactness  # noqa: E402
from bench.speculative_profile import profile_runs  # noqa: E402
from bench.speculative_report import markdown, write_plot  # noqa: E402
from bench.speculative_requantized import alt_quant_appendix  # noqa: E402
from bench.speculative_runner import Bench, run_table  # noqa: E402
from bench.speculative_variants import variants_section  # noqa: E402

DEFAULT_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/pathfinder_bench"


def render(path: Path) -> int:
    report = json.loads(path.read_text())
    analysis = path.with_suffix(".analysis.md")
    if analysis.exists():
        report["analysis"] = analysis.read_text()
        path.write_text(json.dumps(report, indent=1, default=str))
    table = {(r["workload"], r["temperature"], r["system"]): r for r in report["table"]}
    systems = [s for s in SYSTEMS if any(k[2] == s for k in table)]
    plot = write_plot(table, systems, path.with_suffix(".png"))
    if plot != report.get("plot"):
        report["plot"] = plot
        path.write_text(json.dumps(report, indent=1, default=str))
    path.with_suffix(".md").write_text(markdown(report, table))
    print(f"rendered {path.with_suffix('.md')}" + (f" and {plot}" if plot else ""))
    return 0


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--quick",
        action="store_true",
        help="development: 32 tokens, 1 repeat, a short verify-cost measurement",
    )
    parser.add_argument("--out", default=str(BENCH / "results"))
    parser.add_argument("--max-tokens", type=int, default=None, help="default 128 (quick: 32)")
    parser.add_argument("--repeats", type=int, default=None, help="default 3 (quick: 1)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--n-ctx", type=int, default=4096)
    parser.add_argument(
        "--draft-length",
        type=int,
        default=16,
        help="the request's draft_length: the adaptive schedule's cap",
    )
    parser.add_argument("--curve-repeats", type=int, default=None, help="default 7 (quick: 3)")
    parser.add_argument(
        "--hf-lookup-tokens",
        type=int,
        default=10,
        help="prompt_lookup_num_tokens for HF assisted generation",
    )
    parser.add_argument("--hf-cache", default=str(BENCH / ".cache" / "hf"))
    parser.add_argument("--gguf-cache", default=str(BENCH / ".cache" / "gguf"))
    parser.add_argument("--no-hf", action="store_true", help="skip the transformers systems")
    parser.add_argument(
        "--max-probe-interval",
        type=int,
        default=40,
        help="the probe-backoff variant's longest probe interval, in steps",
    )
    parser.add_argument(
        "--no-variants", action="store_true", help="skip the drafter/schedule settings section"
    )
    parser.add_argument(
        "--side-repeats",
        type=int,
        default=None,
        help="repeats of the settings section and the appendix (default 2; quick: 1)",
    )
    parser.add_argument(
        "--no-alt-quant",
        action="store_true",
        help="skip the appendix on requantized copies of the GGUF",
    )
    parser.add_argument("--workloads", default="open-ended,extraction,summary")
    parser.add_argument("--temperatures", default="greedy,t=0.7")
    parser.add_argument(
        "--database-url", default=os.environ.get("BENCH_DATABASE_URL", DEFAULT_DATABASE_URL)
    )
    parser.add_argument("--fresh-db", action="store_true", help="drop and recreate the database")
    parser.add_argument(
        "--max-load",
        type=float,
        default=0.7,
        help="wait until the 1-minute load average is below this",
    )
    parser.add_argument("--max-wait", type=float, default=600.0)
    parser.add_argument(
        "--max-foreign",
        type=float,
        default=0.12,
        help="measure a run again when other processes used more than this share of the CPU",
    )
    parser.add_argument("--retries", type=int, default=3)
    parser.add_argument("--no-profile", action="store_true")
    parser.add_argument("--tag", default="", help="suffix of the result files' names")
    parser.add_argument(
        "--render",
        metavar="JSON",
        help="only rewrite the .md and .png of an earlier run from its .json (adding the "
        "hand-written findings of <stem>.analysis.md, if present, to the .json)",
    )
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.render:
        return render(Path(args.render))
    quick = args.quick
    max_tokens = args.max_tokens or (32 if quick else 128)
    repeats = args.repeats or (1 if quick else 3)
    args.side_repeats = args.side_repeats or (1 if quick else 2)
    args.curve_repeats = args.curve_repeats or (3 if quick else 7)
    chosen_workloads = args.workloads.split(",")
    chosen_temps = args.temperatures.split(",")
    systems = LLAMA_SYSTEMS + ([] if args.no_hf else HF_SYSTEMS)
    command = "python bench/speculative.py " + " ".join(sys.argv[1:] if argv is None else argv)
    wall_started = time.time()
    git = git_revision()  # the code this run loads, not whatever HEAD is when it ends

    print("PostgreSQL:", args.database_url, flush=True)
    postgres = setup_database(args.database_url, args.fresh_db)
    bench = Bench(args)
    hf_info = None
    if not args.no_hf:
        hf_info = bench.load_hf()
        print(f"transformers model loaded in {hf_info['load_s']} s", flush=True)

    print(f"waiting for the 1-minute load average to fall below {args.max_load}", flush=True)
    load = wait_for_quiet(args.max_load, 0 if quick else args.max_wait)
    if not quick:
        load["idle_wait_s"] = round(wait_until_idle(0.05, args.max_wait), 1)
    guard = Guard(args.max_foreign, 0 if quick else args.retries, args.max_wait)
    bench.guard = guard
    print(f"load average {load['before_run']}", flush=True)

    curve = bench.measure_curve()
    from decoding.engine.schedule import interpolated

    curve_fn = interpolated(curve)
    print("verify cost (ms):", {n: round(c * 1e3, 2) for n, c in curve.items()}, flush=True)
    perfect = perfect_bound(curve_fn, max(curve))

    cells = [(w, t) for w in chosen_workloads for t in chosen_temps]
    runs = run_table(bench, systems, cells, repeats, max_tokens, curve)
    load_after = load_average()

    # Greedy exactness: Pathfinder (both sinks) and the loop against llama.cpp plain.
    exactness = greedy_exactness(bench, runs, chosen_workloads, chosen_temps)

    profiles = {}
    if not args.no_profile:
        profiles = profile_runs(bench, chosen_workloads, chosen_temps, max_tokens, curve)

    variants = None
    if not args.no_variants:
        variants = variants_section(bench, cells, max_tokens, args.side_repeats, curve)

    appendix = None
    if not args.no_alt_quant:
        alt_cells = [
            (w, "greedy")
            for w in ("extraction", "open-ended")
            if w in chosen_workloads and "greedy" in chosen_temps
        ]
        appendix = alt_quant_appendix(bench, alt_cells, max_tokens, args.side_repeats)

    # Every trail written in this run, checked link by link (batched by TrailSink).
    from audit.verification import verify_trails
    from decoding.worker.sinks import STEPS_PER_COMMIT

    verification = verify_trails(bench.trails, scope="bench").as_dict()
    print(
        f"verify_trails: ok={verification['ok']} trails={verification['trails_checked']} "
        f"records={verification['records_checked']}",
        flush=True,
    )

    table = aggregate(runs, curve_fn)
    targets = check_targets(table, chosen_workloads, chosen_temps)

    date = dt.datetime.now().strftime("%Y-%m-%d")
    stem = f"speculative-{date}{'-quick' if quick else ''}{args.tag}"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    report = {
        "date": dt.datetime.now().isoformat(timespec="seconds"),
        "command": command,
        "git": git,
        "model": str(bench.gguf),
        "quick": quick,
        "max_tokens": max_tokens,
        "repeats": repeats,
        "threads": args.threads,
        "draft_length": args.draft_length,
        "hf_lookup_tokens": args.hf_lookup_tokens,
        "machine": machine(),
        "postgres": postgres,
        "hf": hf_info,
        "load": load,
        "load_after": load_after,
        "foreign_cpu": {
            "median": median([r["foreign_cpu_share"] for r in runs]),
            "max": max(r["foreign_cpu_share"] for r in runs),
            "runs_over_10pct": sum(r["foreign_cpu_share"] > 0.10 for r in runs),
            "threshold": args.max_foreign,
            "remeasured": guard.retried,
            "waited_s": round(guard.waited_s, 1),
        },
        "wall_s": time.time() - wall_started,
        "curve_repeats": args.curve_repeats,
        "verify_cost": {str(n): c for n, c in curve.items()},
        "perfect_bound": perfect,
        "prompt_tokens": {w: len(p) for w, p in bench.prompts.items()},
        "targets": targets,
        "exactness": exactness,
        "verification": verification,
        "appendix": appendix,
        "variants": variants,
        "profiles": profiles,
        "pathfinder": {"ngrams": bench.ngrams, "steps_per_commit": STEPS_PER_COMMIT},
        "table": [dict(v) for v in table.values()],
        "runs": runs,
    }
    report["plot"] = write_plot(table, systems, out / f"{stem}.png")
    (out / f"{stem}.json").write_text(json.dumps(report, indent=1, default=str))
    (out / f"{stem}.md").write_text(markdown(report, table))
    print(markdown(report, table))
    print(f"wrote {out / stem}.{{md,json{',png' if report['plot'] else ''}}}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

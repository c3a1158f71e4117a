"""The speculative benchmark's report: the markdown of a run's JSON, and its decode-speed plot."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from bench.speculative_cells import PF_AUDIT, PF_SYSTEMS, SHIPPED_NGRAMS, SYSTEMS


def fmt(x, spec=".2f", none="–"):
    return none if x is None else format(x, spec)


def write_plot(table: dict, systems: list[str], path: Path) -> str | None:
    """Draw the decode tok/s chart into path; None (and a note) without matplotlib."""
    try:
        import matplotlib
    except ImportError:
        print(
            "matplotlib (the bench extra) is not installed: no plot. Install it, then "
            f"`python bench/speculative.py --render {path.with_suffix('.json')}` draws it.",
            flush=True,
        )
        return None

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = sorted({(w, t) for w, t, _ in table}, key=lambda x: (x[1], x[0]))
    fig, ax = plt.subplots(figsize=(12, 5.5))
    width = 0.8 / len(systems)
    for i, s in enumerate(systems):
        ys = [table.get((w, t, s), {}).get("decode_tok_s") or 0 for w, t in groups]
        xs = np.arange(len(groups)) + (i - (len(systems) - 1) / 2) * width
        ax.bar(xs, ys, width, label=s)
        for x, y in zip(xs, ys, strict=True):
            if y:
                ax.text(x, y, f"{y:.0f}", ha="center", va="bottom", fontsize=7)
    ax.set_xticks(np.arange(len(groups)))
    ax.set_xticklabels([f"{w}\n{t}" for w, t in groups])
    ax.set_ylabel("decode tokens/s (median)")
    ax.set_title("SmolLM2-135M-Instruct Q4_1, decode phase: Pathfinder vs llama.cpp vs HF")
    ax.legend(fontsize=8, ncol=3)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path.name


def pathfinder_line(report: dict) -> list[str]:
    pf = report.get("pathfinder")
    if not pf:
        return []
    ng = pf["ngrams"]
    return [
        f"Pathfinder as shipped: prompt lookup min_ngram {ng['min_ngram']}, max_ngram "
        f"{ng['max_ngram']} (from {ng['source']}), adaptive schedule, `TrailSink` committing "
        f"{pf['steps_per_commit']} steps per transaction, no `on_step` callback."
    ]


def result_row(r: dict, figures: list[str], pathfinder: list[tuple[str, str]]) -> str:
    """A row of a results table: the cell and system, its figures, Pathfinder's own (blank for
    the other systems), then the audit's cost. audit % (Δ) = (decode s with audit - without) /
    without, same seeds and tokens; audit_ns/decode = the engine's audit_ns (inside sink.record
    and sink.flush) / decode_ns."""
    pf = r["system"] in PF_SYSTEMS
    cells = [
        r["workload"],
        r["temperature"],
        r["system"],
        fmt(r["tokens"], ".0f"),
        *figures,
        *(fmt(r.get(field), spec) if pf else "" for field, spec in pathfinder),
        fmt(100 * r["audit_overhead"], ".1f") if "audit_overhead" in r else "",
        fmt(100 * r["audit_ns_share"], ".1f") + "%" if r["system"] == PF_AUDIT else "",
    ]
    return "| " + " | ".join(cells) + " |"


def markdown(report: dict, table: dict) -> str:
    m = report["machine"]
    lines = [
        f"# Speculative decoding benchmark — {report['date']}",
        "",
        f"Command: `{report['command']}`  ",
        f"Repository: {report['git']}  ",
        (
            f"Plot: `{report['plot']}`  "
            if report.get("plot")
            else "Plot: not drawn (matplotlib, the `bench` extra, was not installed); "
            "`--render` on this run's .json draws it.  "
        ),
        f"Model: `{report['model']}` (SmolLM2-135M-Instruct, Q4_1 GGUF)  ",
        f"Mode: {'quick (development only, not a result)' if report['quick'] else 'full'}; "
        f"max new tokens {report['max_tokens']} (stop at end-of-sequence), "
        f"{report['repeats']} repeats per cell, medians; draft length cap "
        f"{report['draft_length']}; llama.cpp and torch threads {report['threads']}.  ",
        *pathfinder_line(report),
        "",
        "## Machine",
        "",
        f"- CPU: {m['cpu']} ({m['cores']} cores visible; SIMD: {m['simd']})",
        f"- RAM: {m['ram_gib']} GiB; OS: {m['os']}",
        f"- Python {m['python']}, llama-cpp-python {m['llama_cpp_python']}, torch {m['torch']}, "
        f"transformers {m['transformers']}, numpy {m['numpy']}, Django {m.get('django', '?')}",
        f"- PostgreSQL {report['postgres']['server_version']} on 127.0.0.1 (database "
        f"`{report['postgres']['database']}`, fsync={report['postgres']['fsync']}, "
        f"synchronous_commit={report['postgres']['synchronous_commit']})",
        f"- Load average before the run: {fmt(report['load']['before_run'][0])} (1 min), "
        f"{fmt(report['load']['before_run'][1])} (5 min); after: "
        f"{fmt(report['load_after'][0])} (1 min). Waited {report['load']['waited_s']} s for "
        f"the 1-minute load to fall below {report['load']['threshold']}"
        f"{'' if report['load']['quiet'] else ' — IT DID NOT: the numbers are contaminated'}.",
        f"- CPU used by other processes (PostgreSQL included) during each timed run of the "
        f"main table, as a share of both cores: median "
        f"{100 * report['foreign_cpu']['median']:.1f}%, max "
        f"{100 * report['foreign_cpu']['max']:.1f}%; runs above 10%: "
        f"{report['foreign_cpu']['runs_over_10pct']} of {len(report['runs'])}. A run during "
        f"which others used more than {100 * report['foreign_cpu']['threshold']:.0f}% was "
        f"discarded and measured again after a wait for quiet: "
        f"{report['foreign_cpu']['remeasured']} times, {report['foreign_cpu']['waited_s']} s "
        "waited (all runs of the side sections are guarded the same way).",
        f"- Wall time of the whole run: {report['wall_s']:.0f} s.",
        "",
        "## Verify-cost curve (measured at load, `measure_verify_cost`, median of "
        f"{report['curve_repeats']})",
        "",
        "| positions | ms | × 1 position | positions per 1-position cost |",
        "|---:|---:|---:|---:|",
    ]
    c1 = report["verify_cost"]["1"]
    for n, c in report["verify_cost"].items():
        lines.append(f"| {n} | {c * 1e3:.2f} | {c / c1:.2f} | {int(n) * c1 / c:.2f} |")
    pb = report["perfect_bound"]
    lines += [
        "",
        f"With every drafted token accepted, the best a verify pass can do on this curve is "
        f"**{pb['ratio']:.2f}×** one-token decoding (at {pb['positions']} positions): the "
        "ceiling on any speed-up from speculation over the same llama.cpp kernels here.",
        "",
        "## Results (medians)",
        "",
        "Decode = tokens after the prefill, per second of decode phase. × plain = ratio to "
        "llama.cpp plain (Llama.generate) in this run; × loop = ratio to the one-token loop over "
        "the engine's own provider. e2e ratio = plain's end-to-end seconds per token / this "
        "system's. acc = accepted / drafted; len = accepted tokens per step; α = accepted / "
        "tested positions. Bound = expected tokens per pass at the measured α and chosen k, "
        "over the pass's cost, relative to one token per 1-position verify; realized = this "
        "run's tokens over its verify passes' cost on the curve (what it would reach if only "
        "verify passes took time).",
        "",
        "| workload | temp | system | tokens | prefill s | decode tok/s | × plain | × loop | "
        "e2e s | e2e × plain | acc | len | α | k̄ | bound | realized | audit % (Δ) | "
        "audit_ns/decode |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    order = {s: i for i, s in enumerate(SYSTEMS)}
    for key in sorted(table, key=lambda k: (k[1], k[0], order[k[2]])):
        r = table[key]
        figures = [
            fmt(r["prefill_s"], ".3f"),
            fmt(r["decode_tok_s"], ".1f"),
            fmt(r.get("decode_ratio_plain"), ".2f"),
            fmt(r.get("decode_ratio_loop"), ".2f"),
            fmt(r["e2e_s"], ".2f"),
            fmt(r.get("e2e_ratio_plain"), ".2f"),
        ]
        pathfinder = [
            ("acceptance_rate", ".2f"),
            ("mean_accepted_length", ".2f"),
            ("alpha_tested", ".2f"),
            ("mean_k", ".1f"),
            ("bound_alpha", ".2f"),
            ("bound_realized", ".2f"),
        ]
        lines.append(result_row(r, figures, pathfinder))
    lines += ["", "## Targets", "", "| target | measured | met |", "|---|---|---|"]
    for t in report["targets"]:
        lines.append(f"| {t['target']} | {t['measured']} | {'yes' if t['met'] else '**no**'} |")
    lines += [
        "",
        "## Where Pathfinder's decode time goes (ms per output token, medians of the timed runs)",
        "",
        "Audit sink = the engine's audit_ns (sink.record and sink.flush, commits included); "
        "commits = the run's audit transactions (median).",
        "",
        "| workload | temp | system | target logits (llama.cpp) | warp + rule | draft | audit "
        "sink | other | trail open+seal ms | commits |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for key in sorted(table, key=lambda k: (k[1], k[0], order[k[2]])):
        r = table[key]
        if r["system"] not in PF_SYSTEMS:
            continue
        b = r["breakdown_ms_per_token"]
        lines.append(
            f"| {r['workload']} | {r['temperature']} | {r['system']} | "
            + " | ".join(fmt(v, ".3f") for v in b.values())
            + f" | {fmt(r.get('trail_open_seal_ms'), '.1f')} | {fmt(r.get('commits'), '.0f')} |"
        )
    if report.get("profiles"):
        lines += ["", "### cProfile of single Pathfinder+audit runs (not timed runs)", ""]
        for name, prof in report["profiles"].items():
            lines += [
                f"**{name}** — {prof['tokens']} tokens in {prof['steps']} steps; under the "
                f"profiler generate() took {prof['generate_s']:.3f} s (prefill "
                f"{prof['prefill_s']:.3f} s, decode {prof['decode_s']:.3f} s)",
                "",
                "| function (cumulative) | s | ms per step | share of generate() |",
                "|---|---:|---:|---:|",
            ]
            for label, secs in prof["buckets_s"].items():
                lines.append(
                    f"| {label} | {secs:.4f} | {1e3 * secs / prof['steps']:.3f} | "
                    f"{100 * secs / prof['generate_s']:.1f}% |"
                )
            lines += ["", "```", *prof["top_tottime"], "```", ""]
    lines += ["", "## Greedy exactness: Pathfinder vs llama.cpp plain, token for token", ""]
    for item in report["exactness"]:
        lines.append(f"- {item}")
    v = report.get("verification")
    if v:
        lines += [
            "",
            f"Audit trails written by this run, verified link by link with "
            f"`audit.verification.verify_trails`: {v['trails_checked']} trails, "
            f"{v['records_checked']} records, "
            f"{'all intact' if v['ok'] else 'FAILURES: ' + json.dumps(v['failures'])}.",
        ]
    var = report.get("variants")
    if var:
        shipped = var.get("shipped") or SHIPPED_NGRAMS
        lines += [
            "",
            "## Drafter and schedule settings (Pathfinder without audit, decode phase)",
            "",
            f"Same model and curve, {var['repeats']} repeats, medians; × loop = ratio to the "
            "one-token loop run in the same minutes. The shipped default spec drafts with "
            f"min_ngram {shipped['min_ngram']}, max_ngram {shipped['max_ngram']} "
            "(migration 0004; min_ngram 1 before it); max_ngram here is max(3, min_ngram). "
            "Probe backoff = a prototype schedule change, bench only, not shipped (the probe "
            "interval doubles after each "
            "failed probe, up to --max-probe-interval).",
            "",
            "| workload | temp | setting | decode tok/s | × loop | acc | tokens/step | k̄ |",
            "|---|---|---|---:|---:|---:|---:|---:|",
        ]
        for r in sorted(var["table"], key=lambda r: (r["temperature"], r["workload"])):
            lines.append(
                f"| {r['workload']} | {r['temperature']} | {r['variant']} | "
                f"{fmt(r['decode_tok_s'], '.1f')} | {fmt(r['ratio_loop'], '.2f')} | "
                f"{fmt(r['acceptance_rate'], '.2f')} | {fmt(r['tokens_per_step'], '.2f')} | "
                f"{fmt(r['mean_k'], '.1f')} |"
            )
    a = report.get("appendix")
    if a:
        lines += [
            "",
            "## Appendix: the same weights requantized by llama.cpp (not the shipped GGUF)",
            "",
            "Requantized from the shipped Q4_1 file with `llama_model_quantize` (so Q4_0 loses a "
            "little precision, Q8_0/F16 hold the Q4_1 weights almost exactly). Only the "
            "verify-cost curve's shape is the point here.",
            "",
            "| format | MiB | 1 pos ms | 2 | 4 | 8 | 16 | best positions per 1-position cost |",
            "|---|---:|---:|---:|---:|---:|---:|---:|",
        ]
        shipped = {
            "file_mib": None,
            "cost_s": report["verify_cost"],
            "perfect_bound": report["perfect_bound"],
        }
        for name, c in {"Q4_1 (shipped)": shipped, **a["curves"]}.items():
            cost = c["cost_s"]
            lines.append(
                f"| {name} | {fmt(c['file_mib'], '.0f')} | "
                + " | ".join(
                    fmt(cost.get(str(n), None) and cost[str(n)] * 1e3, ".2f")
                    for n in (1, 2, 4, 8, 16)
                )
                + f" | {c['perfect_bound']['ratio']:.2f}× at {c['perfect_bound']['positions']} |"
            )
        if a.get("table"):
            lines += [
                "",
                f"Decode cells on the {a['format']} copy (× plain = ratio to "
                f"Llama.generate on the same {a['format']} file):",
                "",
                "| workload | temp | system | tokens | decode tok/s | × plain | acc | len | "
                "k̄ | audit % (Δ) | audit_ns/decode |",
                "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|",
            ]
            for r in sorted(a["table"], key=lambda r: (r["workload"], order[r["system"]])):
                figures = [fmt(r["decode_tok_s"], ".1f"), fmt(r.get("decode_ratio_plain"), ".2f")]
                pathfinder = [
                    ("acceptance_rate", ".2f"),
                    ("mean_accepted_length", ".2f"),
                    ("mean_k", ".1f"),
                ]
                lines.append(result_row(r, figures, pathfinder))
    if report.get("analysis"):
        lines += ["", "## Analysis", "", report["analysis"]]
    lines.append("")
    return "\n".join(lines)

"""The speculative benchmark's figures from its runs: medians per cell, ratios to llama.cpp, the
audit's overhead, the theoretical bounds on speculation, and the targets met or missed."""

from __future__ import annotations

import statistics
from collections import defaultdict

from bench.speculative_cells import LOOP, PF_AUDIT, PF_NOAUDIT, PF_SYSTEMS, PLAIN


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def expected_tokens(alpha: float, k: int) -> float:
    """Tokens per verify pass drafting k with per-token acceptance alpha (Leviathan et al.)."""
    if alpha >= 1:
        return k + 1.0
    return (1 - alpha ** (k + 1)) / (1 - alpha)


def bounds(run: dict, cost) -> dict:
    """Theoretical speed-ups, relative to one token per 1-position verify (cost(1))."""
    ks = run["draft_lengths"]
    c1 = cost(1)
    alpha = run["accepted"] / run["tested"] if run["tested"] else 0.0
    passes = sum(cost(k + 1) for k in ks)
    expected = sum(expected_tokens(alpha, k) for k in ks)
    drafted_steps = [k for k in ks if k > 0]
    return {
        "alpha": alpha,
        # E[tokens per pass] / relative pass cost, at the measured alpha and the chosen k's
        "bound_alpha": expected * c1 / passes if passes else None,
        # the tokens this run produced, if only its verify passes had cost time
        "bound_realized": run["decode_tokens"] * c1 / passes if passes else None,
        "mean_k": statistics.mean(ks) if ks else 0.0,
        "mean_k_drafting": statistics.mean(drafted_steps) if drafted_steps else 0.0,
        "share_steps_drafting": len(drafted_steps) / len(ks) if ks else 0.0,
    }


def perfect_bound(cost, max_positions: int) -> dict:
    """The best a verify pass can do on the cost curve when every drafted token is accepted."""
    best = max(range(1, max_positions + 1), key=lambda n: n * cost(1) / cost(n))
    return {"positions": best, "ratio": best * cost(1) / cost(best)}


def aggregate(runs: list[dict], curve_fn) -> dict:
    cells = defaultdict(list)
    for r in runs:
        cells[(r["workload"], r["temperature"], r["system"])].append(r)
    table = {}
    for (w, t, s), rs in cells.items():
        tok_s = [r["decode_tokens"] / (r["decode_ns"] / 1e9) for r in rs if r["decode_ns"] > 0]
        row = {
            "workload": w,
            "temperature": t,
            "system": s,
            "repeats": len(rs),
            "tokens": median([len(r["tokens"]) for r in rs]),
            "prefill_s": median([r["prefill_ns"] / 1e9 for r in rs]),
            "decode_s": median([r["decode_ns"] / 1e9 for r in rs]),
            "decode_tok_s": median(tok_s),
            "e2e_s": median([r["e2e_ns"] / 1e9 for r in rs]),
            "e2e_s_per_token": median([r["e2e_ns"] / 1e9 / len(r["tokens"]) for r in rs]),
        }
        if s in PF_SYSTEMS:
            b = [bounds(r, curve_fn) for r in rs]
            row.update(
                acceptance_rate=median(
                    [r["accepted"] / r["drafted"] if r["drafted"] else 0.0 for r in rs]
                ),
                alpha_tested=median([x["alpha"] for x in b]),
                mean_accepted_length=median([r["accepted"] / r["steps"] for r in rs]),
                tokens_per_step=median([len(r["tokens"]) / r["steps"] for r in rs]),
                steps=median([r["steps"] for r in rs]),
                mean_k=median([x["mean_k"] for x in b]),
                mean_k_drafting=median([x["mean_k_drafting"] for x in b]),
                share_steps_drafting=median([x["share_steps_drafting"] for x in b]),
                bound_alpha=median([x["bound_alpha"] for x in b]),
                bound_realized=median([x["bound_realized"] for x in b]),
                audit_ns_share=median([r["audit_ns"] / r["decode_ns"] for r in rs]),
                breakdown_ms_per_token={
                    "target logits (llama.cpp)": median(
                        [r["target_logits_ns"] / 1e6 / len(r["tokens"]) for r in rs]
                    ),
                    "warp + verify rule": median(
                        [
                            (r["verify_ns"] - r["target_logits_ns"]) / 1e6 / len(r["tokens"])
                            for r in rs
                        ]
                    ),
                    "draft": median([r["draft_ns"] / 1e6 / len(r["tokens"]) for r in rs]),
                    "audit sink": median([r["audit_ns"] / 1e6 / len(r["tokens"]) for r in rs]),
                    "other (loop, record, texts, schedule)": median(
                        [
                            (r["decode_ns"] - r["verify_ns"] - r["draft_ns"] - r["audit_ns"])
                            / 1e6
                            / len(r["tokens"])
                            for r in rs
                        ]
                    ),
                },
                trail_open_seal_ms=median(
                    [(r["trail_open_ns"] + r["trail_seal_ns"]) / 1e6 for r in rs]
                )
                if s != PF_NOAUDIT
                else None,
                commits=median([r.get("commits") for r in rs]) if s != PF_NOAUDIT else None,
            )
        table[(w, t, s)] = row
    # ratios to llama.cpp plain, audit overhead
    for (w, t, s), row in table.items():
        plain = table.get((w, t, PLAIN))
        loop = table.get((w, t, LOOP))
        if plain and plain["decode_tok_s"] and row["decode_tok_s"]:
            row["decode_ratio_plain"] = row["decode_tok_s"] / plain["decode_tok_s"]
            row["e2e_ratio_plain"] = plain["e2e_s_per_token"] / row["e2e_s_per_token"]
        if loop and loop["decode_tok_s"] and row["decode_tok_s"]:
            row["decode_ratio_loop"] = row["decode_tok_s"] / loop["decode_tok_s"]
        if s == PF_AUDIT and (w, t, PF_NOAUDIT) in table:
            off = table[(w, t, PF_NOAUDIT)]
            row["audit_overhead"] = (row["decode_s"] - off["decode_s"]) / off["decode_s"]
            # paired by repeat: same seed, same tokens, same steps
            pairs = defaultdict(dict)
            for r in runs:
                if (r["workload"], r["temperature"]) == (w, t) and r["system"] in (s, PF_NOAUDIT):
                    pairs[r["repeat"]][r["system"]] = r
            row["audit_overhead_paired"] = median(
                [
                    (p[s]["decode_ns"] - p[PF_NOAUDIT]["decode_ns"]) / p[PF_NOAUDIT]["decode_ns"]
                    for p in pairs.values()
                    if len(p) == 2
                ]
            )
            row["same_tokens_as_no_audit"] = all(
                p[s]["tokens"] == p[PF_NOAUDIT]["tokens"] for p in pairs.values() if len(p) == 2
            )
    return table


def check_targets(table: dict, chosen_workloads: list[str], chosen_temps: list[str]) -> list[dict]:
    """The performance contract's targets (ARCHITECTURE.md), measured against the table."""
    out = []

    def target(label, key, field, threshold, above=True):
        row = table.get(key)
        if row is None or row.get(field) is None:
            return
        value = row[field]
        met = value >= threshold if above else value <= threshold
        shown = f"{100 * value:.1f}%" if field.startswith("audit") else f"{value:.2f}×"
        out.append({"target": label, "measured": shown, "met": bool(met), "value": value})

    target(
        "extraction, greedy: Pathfinder+audit decode ≥ 2.0× llama.cpp plain",
        ("extraction", "greedy", PF_AUDIT),
        "decode_ratio_plain",
        2.0,
    )
    for t in chosen_temps:
        target(
            f"open-ended, {t}: Pathfinder+audit decode ≥ 0.95× llama.cpp plain",
            ("open-ended", t, PF_AUDIT),
            "decode_ratio_plain",
            0.95,
        )
    for w in chosen_workloads:
        for t in chosen_temps:
            row = table.get((w, t, PF_AUDIT))
            if row is None or row.get("audit_overhead") is None:
                continue
            delta, share = row["audit_overhead"], row["audit_ns_share"]
            out.append(
                {
                    "target": f"{w}, {t}: audit overhead ≤ 5% of decode time (Δ vs no audit; "
                    "audit_ns / decode_ns)",
                    "measured": f"{100 * delta:.1f}%; {100 * share:.1f}%",
                    "met": bool(delta <= 0.05 and share <= 0.05),
                    "value": [delta, share],
                }
            )
    return out

"""Acceptance with and without coupled draws (issue 44 item 2, docs/adr/0032), in one run.

    .venv/bin/python bench/coupled_acceptance.py [--out bench/results] [--seeds 4] [--quick]

Sampled decoding only (greedy is the same under both rules). For each drafter, the same
requests are decoded under speculative sampling (the step-keyed draws of formats 2 to 4) and
under coupled sampling (format 5), and the report gives, per rule, the share of drafted tokens
accepted and the tokens emitted per step (what a step's cost buys), with the worst and the best
workload beside the mean. Acceptance depends on the seeds, not on the clock, so a busy machine
changes no figure here (the load is reported all the same).

  real model, prompt lookup   the default spec (SmolLM2-135M-Instruct, the served file, the
                              spec's prompt lookup over the context), every held-out prompt of
                              bench/data/heldout/prompts.json (extraction, summary, open),
                              temperatures 0.7 and 1.0, --seeds seeds each, 64 tokens
  stub draft models           the engine's stub target and stub draft models of four levels of
                              disagreement (noise 0.25 to 2.0), 200 seeds each: coupling by a
                              common draw agrees less often than speculative sampling's maximal
                              coupling when the draft samples, and this says by how much

Also checked on the real model (and reported): each coupled request's tokens are the same
under the spec's schedule and with nothing drafted (draft length 0), which is what a seed means.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from bench.database import setup_database  # noqa: E402
from bench.machine import load_average, run_facts, save_results  # noqa: E402

DEFAULT_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/pathfinder_bench"
NOISES = (0.25, 0.5, 1.0, 2.0)


class _Counting:
    """An audit sink (decoding.engine.AuditSink's two calls) that keeps only what acceptance
    needs."""

    def __init__(self):
        self.drafted = self.accepted = self.steps = self.emitted = 0

    def record(self, record) -> None:
        self.drafted += record.drafted_count
        self.accepted += record.accepted_count
        self.steps += 1
        self.emitted += len(record.emitted)

    def flush(self) -> None:
        pass

    def figures(self) -> dict:
        return {
            "drafted": self.drafted,
            "accepted": self.accepted,
            "acceptance": self.accepted / self.drafted if self.drafted else None,
            "tokens_per_step": self.emitted / self.steps if self.steps else None,
        }


def decode(drafter, target, prompt, params, *, coupled, schedule=None, sink=None):
    from decoding.engine import GenerationRequest, SpeculativeDecoder

    sink = sink if sink is not None else _Counting()
    request = GenerationRequest("bench", tuple(prompt), params, coupled=coupled)
    result = SpeculativeDecoder(drafter, target, sink).generate(request, schedule=schedule)
    return result.output_token_ids, sink


def real_model(seeds: int, max_tokens: int, quick: bool) -> dict:
    from bench.heldout import prompts
    from decoding.engine import GenerationParams
    from decoding.kinds.registry import DRAFTER_KINDS, PROVIDER_KINDS
    from decoding.models import ModelSpec

    spec = ModelSpec.objects.get(name="smollm2-135m-instruct")
    options = {**(spec.provider_settings or {}), "n_threads": 2, "n_ctx": 4096}
    target = PROVIDER_KINDS[spec.provider].build(
        spec.path, spec.revision, options, spec.name, draft=False
    )
    drafter = DRAFTER_KINDS[spec.drafter].build(spec, target)
    draft_length = (spec.default_params or {}).get("draft_length", 16)
    workloads = prompts(target.tokenizer)
    chosen = {name: workloads[name] for name in ("extraction", "summary", "open")}
    if quick:
        chosen = {"extraction": workloads["extraction"][:1]}
    rows, reproduced, compared = [], 0, 0
    for workload, items in chosen.items():
        for temperature in (0.7, 1.0):
            sinks = {False: _Counting(), True: _Counting()}
            for index, prompt in enumerate(items):
                for seed in range(seeds):
                    params = GenerationParams(
                        max_tokens=max_tokens,
                        temperature=temperature,
                        seed=seed,
                        draft_length=draft_length,
                        eos_token_id=target.tokenizer.eos_token_id,
                    )
                    for coupled in (False, True):
                        tokens, _ = decode(
                            drafter, target, prompt, params, coupled=coupled, sink=sinks[coupled]
                        )
                        if coupled and index == 0:  # the same seed, nothing drafted
                            alone = GenerationParams(**{**params.__dict__, "draft_length": 0})
                            plain, _ = decode(drafter, target, prompt, alone, coupled=True)
                            reproduced += plain == tokens
                            compared += 1
            rows.append(
                {
                    "workload": f"{workload}, t={temperature}",
                    "prompts": len(items),
                    "speculative": sinks[False].figures(),
                    "coupled": sinks[True].figures(),
                }
            )
    return {"rows": rows, "reproduced": reproduced, "compared": compared}


def stub_models(seeds: int) -> list[dict]:
    from decoding.engine import DraftModelDrafter, GenerationParams, StubProvider

    prompt = (1, 2, 3, 4, 1, 2, 3, 4, 1, 2)
    target = StubProvider(seed=0, name="stub-target", vocab_size=32)
    rows = []
    for noise in NOISES:
        drafter = DraftModelDrafter(
            StubProvider(seed=0, noise_seed=1, noise=noise, name="stub-draft", vocab_size=32)
        )
        sinks = {False: _Counting(), True: _Counting()}
        for seed in range(seeds):
            params = GenerationParams(max_tokens=32, temperature=1.0, seed=seed, draft_length=4)
            for coupled in (False, True):
                decode(drafter, target, prompt, params, coupled=coupled, sink=sinks[coupled])
        rows.append(
            {
                "workload": f"stub draft model, noise {noise}",
                "prompts": 1,
                "speculative": sinks[False].figures(),
                "coupled": sinks[True].figures(),
            }
        )
    return rows


def one_position_agreement(trials: int) -> list[dict]:
    """How often a draft model's token equals the target's at one position, by coupling, over
    random contexts of the stub pairs: speculative sampling's maximal coupling (1 − TV, its
    acceptance for one token), the common draw coupled sampling uses (inverse CDF of p and q at
    one u), and a Gumbel-max coupling considered and not used (its draw is one Gumbel per token
    of the vocabulary, which no record can hold or a verifier re-derive; ADR 0032)."""
    import numpy as np

    from decoding.engine import GenerationParams, StubProvider
    from decoding.engine.rng import output_uniform
    from decoding.engine.sampling import sample

    target = StubProvider(seed=0, name="stub-target", vocab_size=32)
    params, contexts = GenerationParams(temperature=1.0), np.random.default_rng(0)
    rows = []
    for noise in NOISES:
        draft = StubProvider(seed=0, noise_seed=1, noise=noise, name="stub-draft", vocab_size=32)
        maximal = common = gumbel = 0.0
        for trial in range(trials):
            context = list(contexts.integers(0, 32, size=6))
            p = target.next_distributions(context, 1, params)[0]
            q = draft.next_distributions(context, 1, params)[0]
            maximal += 1 - 0.5 * np.abs(p - q).sum()
            u = output_uniform(trial, 0)
            common += sample(p, u) == sample(q, u)
            g = np.random.Generator(np.random.Philox(key=[trial, 0])).gumbel(size=len(p))
            with np.errstate(divide="ignore"):
                gumbel += int(np.argmax(np.log(p) + g)) == int(np.argmax(np.log(q) + g))
        rows.append(
            {
                "noise": noise,
                "maximal (1 - TV)": maximal / trials,
                "common draw (used)": common / trials,
                "gumbel-max (not used)": gumbel / trials,
            }
        )
    return rows


def markdown(report: dict) -> str:
    def pct(x):
        return "–" if x is None else f"{100 * x:.1f}%"

    def num(x):
        return "–" if x is None else f"{x:.2f}"

    lines = [
        "# Acceptance with and without coupled draws",
        "",
        f"Command: `{report['command']}`. Machine: {report['machine']['cpu']}, "
        f"{report['machine']['cores']} cores; load average {report['load']['before']} before, "
        f"{report['load']['after']} after (acceptance does not depend on it). Revision "
        f"{report['revision']}.",
        "",
        "| workload | acceptance, speculative | acceptance, coupled | ratio | tokens/step, "
        "speculative | tokens/step, coupled | ratio |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in report["rows"]:
        s, c = row["speculative"], row["coupled"]
        ratio = c["acceptance"] / s["acceptance"] if s["acceptance"] and c["acceptance"] else None
        per_step = (
            c["tokens_per_step"] / s["tokens_per_step"]
            if s["tokens_per_step"] and c["tokens_per_step"]
            else None
        )
        lines.append(
            f"| {row['workload']} | {pct(s['acceptance'])} ({s['accepted']}/{s['drafted']}) | "
            f"{pct(c['acceptance'])} ({c['accepted']}/{c['drafted']}) | {num(ratio)} | "
            f"{num(s['tokens_per_step'])} | {num(c['tokens_per_step'])} | {num(per_step)} |"
        )
    lines += [
        "",
        "One position, the stub pairs: how often the draft's token is the target's, by coupling.",
        "",
        "| draft noise | maximal (1 − TV) | common draw (used) | Gumbel-max (not used) |",
        "|---|---|---|---|",
        *(
            f"| {r['noise']} | {pct(r['maximal (1 - TV)'])} | {pct(r['common draw (used)'])} | "
            f"{pct(r['gumbel-max (not used)'])} |"
            for r in report["one_position"]
        ),
    ]
    real = report["real_model"]
    lines += [
        "",
        f"Reproduction on the real model: {real['reproduced']} of {real['compared']} coupled "
        "requests gave the same tokens with the spec's schedule as with nothing drafted.",
        "",
        report["reading"],
        "",
    ]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=str(ROOT / "bench" / "results"))
    parser.add_argument("--seeds", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--stub-seeds", type=int, default=200)
    parser.add_argument("--database-url", default=DEFAULT_DATABASE_URL)
    parser.add_argument("--quick", action="store_true", help="a smoke run; figures meaningless")
    args = parser.parse_args(argv)
    setup_database(args.database_url, fresh=False)
    before = load_average()
    real = real_model(1 if args.quick else args.seeds, 16 if args.quick else args.max_tokens,
                      args.quick)  # fmt: skip
    stubs = stub_models(10 if args.quick else args.stub_seeds)
    report = {
        **run_facts("coupled_acceptance.py"),
        "load": {"before": before, "after": load_average()},
        "rows": [*real["rows"], *stubs],
        "one_position": one_position_agreement(100 if args.quick else 2000),
        "real_model": {k: real[k] for k in ("reproduced", "compared")},
        "reading": (
            "A copied draft (prompt lookup: q one-hot) is kept with probability p(x) under either "
            "rule, so the real model's acceptance differs only by which tokens each rule's "
            "draws happened to pick; a sampling draft model agrees with the target under a "
            "common draw less often than under speculative sampling's maximal coupling, by the "
            "share the stub rows show."
        ),
    }
    if args.quick:
        print(json.dumps(report, indent=1, default=str))
        return 0
    save_results(Path(args.out), "coupled-acceptance", report, markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())

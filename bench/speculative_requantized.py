"""The appendix: the shipped weights requantized by llama.cpp (Q4_0, Q8_0, F16), to see whether
the verify-cost curve's shape is the format's; the decode cells are also run on one of them."""

from __future__ import annotations

import functools
import gc
from pathlib import Path

from bench.speculative_analysis import aggregate, perfect_bound
from bench.speculative_cells import PF_AUDIT, PF_NOAUDIT, PLAIN, TEMPERATURES
from bench.speculative_runner import WARMUP_TEXT, Bench, CallTimer, plain_llama

ALT_QUANTS = {"Q4_0": 2, "Q8_0": 7, "F16": 1}  # llama_ftype values
ALT_RUN = "Q4_0"  # the format the decode cells are also run on


def requantized(bench: Bench, name: str) -> Path:
    """bench/.cache/gguf/<name>.gguf: the shipped Q4_1 GGUF requantized by llama.cpp (once)."""
    import ctypes

    import llama_cpp

    path = Path(bench.args.gguf_cache) / f"smollm2-135m-instruct.from-Q4_1.{name}.gguf"
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        params = llama_cpp.llama_model_quantize_default_params()
        params.ftype = ALT_QUANTS[name]
        params.allow_requantize = True
        params.nthread = bench.args.threads
        scratch = path.with_suffix(".part")
        status = llama_cpp.llama_model_quantize(
            str(bench.gguf).encode(), str(scratch).encode(), ctypes.byref(params)
        )
        if status != 0:
            raise RuntimeError(f"llama_model_quantize to {name} failed ({status})")
        scratch.rename(path)
    return path


def alt_quant_appendix(bench: Bench, cells, max_tokens: int, repeats: int) -> dict:
    from decoding.engine import measure_verify_cost
    from decoding.engine.providers.llamacpp import LlamaCppProvider
    from decoding.engine.schedule import interpolated

    args = bench.args
    top = args.draft_length + 1
    grid = sorted({p for p in (1, 2, 4, 8, 16, 17, 24, 32) if p <= top} | {top})
    warm = bench.tokenizer.encode(WARMUP_TEXT)
    out = {"curves": {}, "runs": [], "format": ALT_RUN}
    for name in ALT_QUANTS:
        path = requantized(bench, name)
        provider = LlamaCppProvider(
            path,
            name=f"smollm2-135m-instruct-{name}",
            revision=name,
            n_threads=args.threads,
            n_ctx=args.n_ctx,
        )
        curve = measure_verify_cost(provider, warm, positions=grid, repeats=args.curve_repeats)
        fn = interpolated(curve)
        out["curves"][name] = {
            "file_mib": round(path.stat().st_size / 2**20, 1),
            "cost_s": {str(n): c for n, c in curve.items()},
            "perfect_bound": perfect_bound(fn, top),
        }
        print(
            f"appendix {name}: verify cost (ms)",
            {n: round(c * 1e3, 2) for n, c in curve.items()},
            flush=True,
        )
        if name != ALT_RUN:
            del provider
            continue
        provider.bench_timer = CallTimer(provider)
        llama = plain_llama(path, args)
        systems = [PLAIN, PF_AUDIT, PF_NOAUDIT]
        # one system on one prompt, on this copy's models
        job = functools.partial(run_on, bench, llama, provider, curve)
        for workload, temp_label in cells:  # warm-up, untimed
            for system in systems:
                job(system, bench.prompts[workload], TEMPERATURES[temp_label], 8, 0)
        for rep in range(repeats):
            for ci, (workload, temp_label) in enumerate(cells):
                shift = (rep + ci) % len(systems)
                for system in systems[shift:] + systems[:shift]:
                    prompt, temperature = bench.prompts[workload], TEMPERATURES[temp_label]
                    r = bench.guard.measure(
                        functools.partial(job, system, prompt, temperature, max_tokens, 1000 + rep)
                    )
                    r.update(
                        workload=workload,
                        temperature=temp_label,
                        system=system,
                        repeat=rep,
                        seed=1000 + rep,
                    )
                    out["runs"].append(r)
                    print(
                        f"appendix {name} {workload} {temp_label} {system}: "
                        f"{r['decode_tokens'] / (r['decode_ns'] / 1e9):.1f} tok/s",
                        flush=True,
                    )
        out["table"] = [dict(v) for v in aggregate(out["runs"], fn).values()]
        del llama, provider, job  # job holds them too
        gc.collect()
    return out


def run_on(bench: Bench, llama, provider, curve, system, prompt, temperature, max_tokens, seed):
    if system == PLAIN:
        return bench.run_plain(prompt, temperature, max_tokens, seed, llama=llama)
    return bench.run_pathfinder(
        prompt,
        temperature,
        max_tokens,
        seed,
        curve=curve,
        audit=system != PF_NOAUDIT,
        target=provider,
    )

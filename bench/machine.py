"""The machine a benchmark runs on, and a guard against measuring while it is busy.

llama.cpp's worker threads spin while they wait for each other: with two threads on two cores,
any other busy process makes decoding 2-20x slower, so every timed run notes the CPU share
other processes used meanwhile and is measured again when that share is too high.
"""

from __future__ import annotations

import datetime as dt
import gc
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent


def load_average() -> tuple[float, float, float]:
    return os.getloadavg()


def cpu_seconds() -> tuple[float, float]:
    """(busy CPU seconds of the whole machine, CPU seconds of this process), both cumulative."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in fields[:8])
    busy = (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")
    own = os.times()
    return busy, own.user + own.system


def others_busy(seconds: float = 3.0) -> float:
    """Share of the machine's CPU that other processes use over the next few seconds."""
    busy0, own0 = cpu_seconds()
    started = time.perf_counter()
    time.sleep(seconds)
    busy1, own1 = cpu_seconds()
    capacity = (time.perf_counter() - started) * (os.cpu_count() or 1)
    return max(0.0, (busy1 - busy0) - (own1 - own0)) / capacity


def wait_until_idle(max_share: float, max_wait: float) -> float:
    """Sleep until other processes use less than max_share of the CPU; return seconds waited."""
    started = time.time()
    while time.time() - started < max_wait:
        share = others_busy()
        if share < max_share:
            break
        print(f"  other processes use {100 * share:.0f}% of the CPU: waiting", flush=True)
        time.sleep(10)
    return time.time() - started


class Guard:
    """Runs a measurement; if other processes used more than max_share of the CPU meanwhile
    (llama.cpp's spinning threads make that ruinous), waits for quiet and measures again, up to
    `retries` times. The last attempt is kept whatever its share; each result records it."""

    def __init__(self, max_share: float, retries: int, max_wait: float) -> None:
        self.max_share, self.retries, self.max_wait = max_share, retries, max_wait
        self.retried = 0
        self.waited_s = 0.0

    def measure(self, run) -> dict:
        for attempt in range(self.retries + 1):
            gc.collect()
            time.sleep(0.05)
            busy0, own0 = cpu_seconds()
            wall0 = time.perf_counter()
            result = run()
            busy1, own1 = cpu_seconds()
            # CPU time other processes (PostgreSQL included) used during this run, as a share
            # of the machine's capacity: the contamination of the measurement.
            foreign = max(0.0, (busy1 - busy0) - (own1 - own0))
            share = foreign / ((time.perf_counter() - wall0) * (os.cpu_count() or 1))
            if share <= self.max_share or attempt == self.retries:
                break
            self.retried += 1
            print(f"  others used {100 * share:.0f}% of the CPU: measuring again", flush=True)
            self.waited_s += wait_until_idle(self.max_share / 2, self.max_wait)
        result["foreign_cpu_share"] = share
        result["attempts"] = attempt + 1
        return result


def wait_for_quiet(threshold: float, max_wait: float) -> dict:
    """Sleep until the 1-minute load average is below threshold (at most max_wait seconds)."""
    started = time.time()
    first = load_average()
    while load_average()[0] >= threshold and time.time() - started < max_wait:
        print(f"  load average {load_average()[0]:.2f} >= {threshold}: waiting", flush=True)
        time.sleep(15)
    return {
        "threshold": threshold,
        "waited_s": round(time.time() - started, 1),
        "at_start": first,
        "before_run": load_average(),
        "quiet": load_average()[0] < threshold,
    }


# The /proc/cpuinfo flags that decide llama.cpp's build (scripts/llama_build_flags.py) and speed.
SIMD_FLAGS = ("avx", "avx2", "fma", "f16c", "avx512f", "avx512_vnni", "avx512vbmi", "avx512_bf16",
              "amx_tile")  # fmt: skip


def machine() -> dict:
    info = {}
    cpuinfo = Path("/proc/cpuinfo").read_text()
    for line in cpuinfo.splitlines():
        if line.startswith("model name"):
            info["cpu"] = line.split(":", 1)[1].strip()
            break
    flags = next((ln for ln in cpuinfo.splitlines() if ln.startswith("flags")), "")
    named = set(flags.split(":", 1)[-1].split())
    info["simd"] = " ".join(f for f in SIMD_FLAGS if f in named)
    info["cores"] = os.cpu_count()
    meminfo = Path("/proc/meminfo").read_text().splitlines()
    total_kb = int(next(ln for ln in meminfo if ln.startswith("MemTotal")).split()[1])
    info["ram_gib"] = round(total_kb / 2**20, 1)
    info["os"] = platform.platform()
    info["python"] = platform.python_version()
    import llama_cpp
    import torch
    import transformers

    info["llama_cpp_python"] = llama_cpp.__version__
    info["torch"] = torch.__version__
    info["transformers"] = transformers.__version__
    info["numpy"] = np.__version__
    try:
        import django

        info["django"] = django.__version__
    except ImportError:
        pass
    return info


def git_revision() -> str:
    try:
        rev = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "decoding", "audit"],
            cwd=ROOT,
            capture_output=True,
            text=True,
        ).stdout.strip()
        return rev + (" (engine/audit files modified or untracked)" if dirty else "")
    except OSError:
        return "unknown"


def run_facts(script: str) -> dict:
    """What every result names first: its date, the command as run, the revision, the machine."""
    return {
        "date": dt.date.today().isoformat(),
        "command": " ".join(["python", f"bench/{script}", *sys.argv[1:]]),
        "revision": git_revision(),
        "machine": machine(),
    }


def save_results(out: Path, stem: str, report: dict, text: str) -> None:
    """<out>/<stem>-<date>.json (the report) and .md (its text)."""
    out.mkdir(parents=True, exist_ok=True)
    name = f"{stem}-{report['date']}"
    (out / f"{name}.json").write_text(json.dumps(report, indent=1) + "\n")
    (out / f"{name}.md").write_text(text)

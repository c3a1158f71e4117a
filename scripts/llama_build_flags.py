"""The llama.cpp build for this CPU: `--cmake` prints its CMAKE_ARGS, `--key` its wheelhouse key.

llama.cpp's own -march=native would also switch on AMX on Sapphire Rapids, and its AMX matmul
crashes (SIGSEGV) on any multi-token batch of the default model; so the build is portable
(GGML_NATIVE=OFF) with each SIMD extension named explicitly, from the widest the CPU has:

- AVX-512 (F, BW, DQ, VL, CD: ggml's GGML_AVX512), with VNNI, VBMI and BF16 where present;
- else AVX2 with FMA, F16C and BMI2 (ggml's portable default);
- else no SIMD beyond SSE 4.2 (any x86-64 from the last decade), or the compiler's default
  on another architecture.

Standard library only: it runs before anything is installed.
"""

from __future__ import annotations

import argparse
import platform
from pathlib import Path

AVX512_BASE = ("avx512f", "avx512bw", "avx512dq", "avx512vl", "avx512cd")
# CPU flag as the kernel spells it in /proc/cpuinfo (arch/x86/include/asm/cpufeatures.h:
# "avx512vbmi" has no underscore, "avx512_vnni" and "avx512_bf16" do) -> (ggml option, key part)
AVX512_EXTRAS = {
    "avx512_vnni": ("GGML_AVX512_VNNI", "vnni"),
    "avx512vbmi": ("GGML_AVX512_VBMI", "vbmi"),
    "avx512_bf16": ("GGML_AVX512_BF16", "bf16"),
}
AVX2_BASE = ("avx", "avx2", "fma", "f16c", "bmi2")
NEVER = ("GGML_AMX_TILE", "GGML_AMX_INT8", "GGML_AMX_BF16")


def cpu_flags(cpuinfo: str) -> set[str]:
    for line in cpuinfo.splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


def build(flags: set[str], machine: str) -> tuple[str, list[str]]:
    """(key, CMake options) for a CPU with these /proc/cpuinfo flags."""
    options = ["-DGGML_NATIVE=OFF", *(f"-D{name}=OFF" for name in NEVER)]
    if machine not in ("x86_64", "amd64"):
        return machine, options
    if all(flag in flags for flag in AVX512_BASE):
        extras = [flag for flag in AVX512_EXTRAS if flag in flags]
        options += ["-DGGML_AVX=ON", "-DGGML_AVX2=ON", "-DGGML_FMA=ON", "-DGGML_F16C=ON"]
        options += ["-DGGML_BMI2=ON", "-DGGML_AVX512=ON"]
        options += [f"-D{option}={'ON' if flag in extras else 'OFF'}"
                    for flag, (option, _) in AVX512_EXTRAS.items()]  # fmt: skip
        key = "-".join(["avx512", *(AVX512_EXTRAS[flag][1] for flag in extras)])
        return key, options
    if all(flag in flags for flag in AVX2_BASE):
        on = ("GGML_AVX", "GGML_AVX2", "GGML_FMA", "GGML_F16C", "GGML_BMI2")
        return "avx2", [*options, *(f"-D{name}=ON" for name in on), "-DGGML_AVX512=OFF"]
    off = ("GGML_AVX", "GGML_AVX2", "GGML_FMA", "GGML_F16C", "GGML_BMI2", "GGML_AVX512")
    return "sse42", [*options, *(f"-D{name}=OFF" for name in off)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--cmake", action="store_true", help="print CMAKE_ARGS")
    what.add_argument("--key", action="store_true", help="print the wheelhouse key")
    parser.add_argument("--cpuinfo", default="/proc/cpuinfo", help=argparse.SUPPRESS)
    args = parser.parse_args()
    path = Path(args.cpuinfo)
    flags = cpu_flags(path.read_text()) if path.is_file() else set()
    key, options = build(flags, platform.machine().lower())
    print(" ".join(options) if args.cmake else key)


if __name__ == "__main__":
    main()

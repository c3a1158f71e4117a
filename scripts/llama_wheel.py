"""Build llama-cpp-python's wheel from its source release with Pathfinder's llama.cpp patches.

    python scripts/llama_wheel.py --patch-set
        prints the patch set's name: "bi." and 12 hex digits of patches/llama.cpp/*.patch's SHA-256
    python scripts/llama_wheel.py --version 0.3.36 --wheelhouse DIR --cmake-args "..." [--unpatched]
        downloads the sdist, applies every patch (in name order) to its vendored llama.cpp, labels
        the version 0.3.36+<patch set> (so `llama_cpp.__version__`, and with it every decision
        record's runtime_version, names the patch set), and builds the wheel into DIR

--unpatched builds the stock release instead (the baseline bench/verify_cost.py compares with).
Standard library only: it runs before anything is installed.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PATCHES = ROOT / "patches" / "llama.cpp"


def patch_files(directory: Path = PATCHES) -> list[Path]:
    return sorted(directory.glob("*.patch"))


def patch_set(directory: Path = PATCHES) -> str:
    """A name for the patch set that changes whenever a patch file, its name or its order does."""
    digest = hashlib.sha256()
    for path in patch_files(directory):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return f"bi.{digest.hexdigest()[:12]}"


def download_sdist(version: str, into: Path) -> Path:
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", ":all:",
         "--dest", str(into), f"llama-cpp-python=={version}"],
        check=True,
    )  # fmt: skip
    (archive,) = into.glob("llama_cpp_python-*.tar.gz")
    with tarfile.open(archive) as tar:
        tar.extractall(into, filter="data")
    return into / f"llama_cpp_python-{version}"


def apply_patches(source: Path) -> None:
    vendored = source / "vendor" / "llama.cpp"
    for path in patch_files():
        print(f"applying {path.relative_to(ROOT)}", flush=True)
        subprocess.run(
            ["patch", "--quiet", "--forward", "--strip=1", "--directory", str(vendored),
             "--input", str(path)],
            check=True,
        )  # fmt: skip


def label_version(source: Path, version: str, label: str) -> None:
    init = source / "llama_cpp" / "__init__.py"
    text = init.read_text()
    stock = f'__version__ = "{version}"'
    if stock not in text:
        raise SystemExit(f"{init} does not say {stock}: is this llama-cpp-python {version}?")
    init.write_text(text.replace(stock, f'__version__ = "{version}+{label}"'))


def build_wheel(source: Path, wheelhouse: Path, cmake_args: str) -> None:
    wheelhouse.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "CMAKE_ARGS": cmake_args}
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-cache-dir",
         "--wheel-dir", str(wheelhouse), str(source)],
        check=True, env=env,
    )  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--patch-set", action="store_true", help="print the patch set's name")
    parser.add_argument("--version", help="llama-cpp-python version to build")
    parser.add_argument("--wheelhouse", type=Path, help="folder the wheel is written to")
    parser.add_argument("--cmake-args", default="", help="CMAKE_ARGS for llama.cpp's build")
    parser.add_argument("--unpatched", action="store_true", help="build the stock release")
    args = parser.parse_args()
    if args.patch_set:
        print(patch_set())
        return
    if not (args.version and args.wheelhouse):
        parser.error("--version and --wheelhouse are required to build")
    if not re.fullmatch(r"[0-9.]+", args.version):
        parser.error(f"--version must be a release number, got {args.version!r}")
    with tempfile.TemporaryDirectory(prefix="llama-wheel-") as scratch:
        source = download_sdist(args.version, Path(scratch))
        if not args.unpatched:
            apply_patches(source)
            label_version(source, args.version, patch_set())
        build_wheel(source, args.wheelhouse, args.cmake_args)


if __name__ == "__main__":
    main()

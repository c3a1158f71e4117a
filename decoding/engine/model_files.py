"""The file a default spec serves: the shipped GGUF requantized once by llama.cpp's own quantizer.

The shipped SmolLM2 file is Q4_1, which has neither llamafile's sgemm nor CPU repacking for
multi-token batches, so prefill and verify passes are slow on it; Q8_0, Q4_0 and IQ4_NL have
them (ADR 0009 has the measurements and each one's quality cost). The derived file is made at
first use, cached under the model cache with a provenance file (source SHA-256, quantizer,
type, the result's SHA-256), and checked against that provenance at every use: a cached file
that no longer matches is remade, never served. llama.cpp's quantizer is deterministic (scalar
reference code, per block), so the same source and quantizer version give the same bytes on
every machine.
"""

from __future__ import annotations

import ctypes
import fcntl
import json
import os
from dataclasses import dataclass
from pathlib import Path

from .weights import weights_sha256

# llama.cpp's file types (llama_ftype), by the name its quantize tool uses.
FILE_TYPES = {"Q4_0": 2, "Q4_1": 3, "Q5_0": 8, "Q8_0": 7, "IQ4_NL": 25}


@dataclass(frozen=True)
class DerivedFile:
    path: Path
    sha256: str
    source_sha256: str


def _llama_cpp_version() -> str:
    import llama_cpp

    return llama_cpp.__version__


def requantized(source: Path, cache_dir: Path, file_type: str) -> DerivedFile:
    """`source` requantized to `file_type`, made once under cache_dir/gguf and verified at use."""
    if file_type not in FILE_TYPES:
        raise ValueError(f"unknown GGUF file type {file_type!r}; one of {', '.join(FILE_TYPES)}")
    source_hash = weights_sha256(source)
    version = _llama_cpp_version()
    quantizer = f"llama.cpp llama_model_quantize (llama-cpp-python {version})"
    directory = Path(cache_dir) / "gguf"
    directory.mkdir(parents=True, exist_ok=True)
    # Keyed by source and quantizer: a new llama.cpp quantizes afresh rather than trusting
    # bytes an older one wrote.
    stem = f"{source.stem}.{file_type}.{source_hash[:12]}.llama-cpp-{version}"
    target, provenance = directory / f"{stem}.gguf", directory / f"{stem}.json"
    expected = {"source_sha256": source_hash, "file_type": file_type, "quantizer": quantizer}
    with open(directory / f"{stem}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one process quantizes; the others wait and reuse
        found = _verified(target, expected)
        if found is None:
            _quantize(source, target, file_type)
            found = weights_sha256(target)
            record = {**expected, "source": str(source), "sha256": found}
            _write_atomically(provenance, json.dumps(record, indent=2, sort_keys=True) + "\n")
    return DerivedFile(path=target, sha256=found, source_sha256=source_hash)


def source_sha256(path: str | os.PathLike[str]) -> str:
    """The SHA-256 of the file `path` was made from, when it is a derived file whose provenance
    still holds; "" for a file loaded as given."""
    target = Path(path)
    recorded = _provenance(target)
    if recorded is None or recorded.get("sha256") != weights_sha256(target):
        return ""
    return recorded.get("source_sha256", "")


def _provenance(target: Path) -> dict | None:
    """The provenance record beside a derived file, or None when there is none to read."""
    provenance = target.with_suffix(".json")
    if not (target.is_file() and provenance.is_file()):
        return None
    try:
        recorded = json.loads(provenance.read_text())
    except ValueError:
        return None
    return recorded if isinstance(recorded, dict) else None


def _verified(target: Path, expected: dict) -> str | None:
    """The cached file's SHA-256 when it exists and matches its provenance, else None."""
    recorded = _provenance(target)
    if recorded is None or any(recorded.get(key) != value for key, value in expected.items()):
        return None
    actual = weights_sha256(target)
    return actual if recorded.get("sha256") == actual else None


def _quantize(source: Path, target: Path, file_type: str) -> None:
    import llama_cpp
    from llama_cpp._utils import suppress_stdout_stderr

    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = FILE_TYPES[file_type]
    params.allow_requantize = True  # the source is itself quantized
    params.nthread = os.cpu_count() or 1
    scratch = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        with suppress_stdout_stderr(disable=False):  # a line per tensor otherwise
            status = llama_cpp.llama_model_quantize(
                str(source).encode(), str(scratch).encode(), ctypes.byref(params)
            )
        if status != 0:
            raise RuntimeError(f"llama_model_quantize failed ({status}) on {source}")
        os.replace(scratch, target)
    finally:
        scratch.unlink(missing_ok=True)


def _write_atomically(path: Path, text: str) -> None:
    scratch = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    scratch.write_text(text)
    os.replace(scratch, path)

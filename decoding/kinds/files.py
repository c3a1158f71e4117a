"""Local model files: where a spec's path points (blank: the default model file), its vocabulary
size from metadata, and its tokenizer alone (no weights), cached per process."""

from __future__ import annotations

import atexit
import json
from pathlib import Path

from django.conf import settings
from django.core.exceptions import ValidationError

from decoding.engine import Tokenizer
from decoding.engine.model_files import requantized
from decoding.engine.weights import SHIPPED_GGUF_TYPE, default_gguf_path

GGUF_SUFFIX = ".gguf"


def resolve_path(path: str) -> Path:
    """A spec's weights: the given file or directory, or the default model file when blank."""
    return Path(path).expanduser() if path else default_model_file()


def default_model_file() -> Path:
    """The shipped GGUF requantized to PATHFINDER_DEFAULT_GGUF_TYPE (made once, then verified
    against its provenance at each use), or the shipped file itself when that is its type."""
    shipped = default_gguf_path()
    file_type = settings.PATHFINDER_DEFAULT_GGUF_TYPE
    if file_type == SHIPPED_GGUF_TYPE:
        return shipped
    return requantized(shipped, settings.PATHFINDER_MODEL_CACHE_DIR, file_type).path


_tokenizers: dict[str, Tokenizer] = {}


def existing(path: str, *, field: str) -> Path:
    try:
        weights = resolve_path(path)
    except Exception as exc:
        raise ValidationError({field: str(exc)}) from exc
    if not weights.exists():
        raise ValidationError({field: f"{weights} does not exist"})
    return weights


def is_gguf(weights: Path) -> bool:
    return weights.is_file() and weights.suffix == GGUF_SUFFIX


def gguf_vocab_size(path: Path) -> int:
    from gguf import GGUFReader  # heavy; only when checking a GGUF spec

    field = GGUFReader(str(path)).fields.get("tokenizer.ggml.tokens")
    if field is None:
        raise ValidationError({"path": f"{path} has no tokenizer vocabulary"})
    return len(field.data)


def vocab_size(path: str, *, field: str, directories: bool) -> int:
    """A GGUF file's vocabulary, or (directories) a Hugging Face directory's config's."""
    weights = existing(path, field=field)
    if is_gguf(weights):
        return gguf_vocab_size(weights)
    config = weights / "config.json"
    if directories and config.is_file():
        return int(json.loads(config.read_text())["vocab_size"])
    raise ValidationError({field: f"{weights} is neither a GGUF file nor a model directory"})


def tokenizer(path: str) -> Tokenizer:
    """The vocabulary alone: a GGUF's through llama.cpp (vocab_only, no weights, no KV cache),
    a Hugging Face directory's through its tokenizer files."""
    if path not in _tokenizers:  # by the spec's path: a web process asks once per request
        weights = resolve_path(path)
        if weights.suffix == GGUF_SUFFIX:
            import llama_cpp

            from decoding.engine.providers.llamacpp import LlamaCppTokenizer

            vocab_only = llama_cpp.Llama(model_path=str(weights), vocab_only=True, verbose=False)
            if not _tokenizers:
                # Freed while llama.cpp's bindings exist: at interpreter teardown its __del__
                # fails, and a web process stopped by Ctrl-C printed that traceback. Registered
                # after llama_cpp's own exit handlers, so it runs before them.
                atexit.register(release)
            _tokenizers[path] = LlamaCppTokenizer(vocab_only)
        else:
            from transformers import AutoTokenizer

            from decoding.engine.providers.transformers_hf import HFTokenizer

            _tokenizers[path] = HFTokenizer(AutoTokenizer.from_pretrained(weights))
    return _tokenizers[path]


def release() -> None:
    _tokenizers.clear()

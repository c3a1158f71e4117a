"""The default model file: the shipped GGUF requantized by llama.cpp's quantizer, made once,
verified at every use, named in records by its own SHA-256 and its source's."""

from __future__ import annotations

import hashlib
import json
import os

import pytest

from decoding.engine.model_files import requantized, source_sha256
from decoding.engine.providers.llamacpp import LlamaCppProvider, build_features

from .conftest import THREADS


def sha256_of(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def q4_0(gguf_path, tmp_path_factory):
    return requantized(gguf_path, tmp_path_factory.mktemp("model-cache"), "Q4_0")


def test_it_is_made_once_with_its_provenance_and_found_again(gguf_path, q4_0):
    assert q4_0.path.is_file() and q4_0.path.parent.name == "gguf"
    assert q4_0.sha256 == sha256_of(q4_0.path) != sha256_of(gguf_path)
    assert q4_0.source_sha256 == sha256_of(gguf_path)
    provenance = json.loads(q4_0.path.with_suffix(".json").read_text())
    assert provenance["sha256"] == q4_0.sha256
    assert provenance["source_sha256"] == q4_0.source_sha256
    assert provenance["file_type"] == "Q4_0"
    assert "llama_model_quantize" in provenance["quantizer"]
    mtime = q4_0.path.stat().st_mtime_ns
    again = requantized(gguf_path, q4_0.path.parent.parent, "Q4_0")
    assert again == q4_0 and q4_0.path.stat().st_mtime_ns == mtime  # not made again


def test_llama_cpps_quantizer_gives_the_same_bytes_every_time(gguf_path, q4_0, tmp_path):
    # So the default file's SHA-256 is the same on every machine with this llama.cpp.
    assert requantized(gguf_path, tmp_path, "Q4_0").sha256 == q4_0.sha256


def test_a_cached_file_that_no_longer_matches_its_provenance_is_made_again(gguf_path, tmp_path):
    made = requantized(gguf_path, tmp_path, "Q4_0")
    with open(made.path, "r+b") as handle:  # one byte of a tensor changed
        handle.seek(made.path.stat().st_size - 100)
        byte = handle.read(1)
        handle.seek(-1, os.SEEK_CUR)
        handle.write(bytes([byte[0] ^ 0xFF]))
    assert source_sha256(made.path) == ""  # no longer vouched for
    again = requantized(gguf_path, tmp_path, "Q4_0")
    assert again.sha256 == made.sha256 == sha256_of(again.path)


def test_an_unknown_type_is_refused_by_name(gguf_path, tmp_path):
    with pytest.raises(ValueError, match="Q3_X"):
        requantized(gguf_path, tmp_path, "Q3_X")


def test_records_name_the_loaded_file_its_source_and_the_kernels_built_in(gguf_path, q4_0):
    provider = LlamaCppProvider(q4_0.path, name="served", n_threads=THREADS)
    identity = provider.identity
    assert identity.sha256 == q4_0.sha256
    assert identity.source_sha256 == sha256_of(gguf_path)
    assert identity.runtime_version.endswith(f"({build_features()})")
    assert "AVX" in build_features() or "NEON" in build_features()
    shipped = LlamaCppProvider(gguf_path, name="shipped", n_threads=THREADS).identity
    assert shipped.source_sha256 == ""
    # Each names its own quantization, read from the file (not from a setting).
    assert (identity.file_type, shipped.file_type) == ("Q4_0", "Q4_1")
    # The same vocabulary and chat template: only the weights' type differs.
    assert identity.tokenizer_sha256 == shipped.tokenizer_sha256
    assert identity.chat_template_sha256 == shipped.chat_template_sha256

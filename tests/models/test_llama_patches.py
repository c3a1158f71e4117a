"""The llama.cpp that `make install` puts in .venv: built with patches/llama.cpp, named by its
patch set in every record, bit for bit batch-invariant in its mat-mul kernels, with soft_max's
SIMD maximum finding every row's maximum, and attention skipping only what its mask hides (the C
tests patches/llama.cpp/test-*.c, compiled here against the installed library)."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
from pathlib import Path

import llama_cpp
import pytest

from decoding.engine.providers.llamacpp import runtime_version

ROOT = Path(__file__).resolve().parents[2]
PATCHES = ROOT / "patches" / "llama.cpp"

spec = importlib.util.spec_from_file_location("llama_wheel", ROOT / "scripts" / "llama_wheel.py")
wheel_script = importlib.util.module_from_spec(spec)
spec.loader.exec_module(wheel_script)


def test_the_installed_llama_cpp_is_built_with_this_checkouts_patch_set():
    version, _, label = llama_cpp.__version__.partition("+")
    assert label == wheel_script.patch_set(), (
        f"llama_cpp {llama_cpp.__version__} is not built with patches/llama.cpp as they are "
        f"now ({wheel_script.patch_set()}): run make install"
    )
    assert version == "0.3.36"


def test_records_name_the_patch_set_in_their_runtime_version():
    assert f"+{wheel_script.patch_set()} (" in runtime_version()


def run_c_test(source: Path, tmp_path: Path) -> str:
    package = Path(llama_cpp.__file__).parent
    library, include = package / "lib", package.parent / "include"
    binary = tmp_path / source.stem
    subprocess.run(
        ["gcc", "-O2", "-ffp-contract=off", "-o", str(binary), str(source), f"-I{include}",
         f"-L{library}", "-lggml", "-lggml-base", "-lggml-cpu", "-lm", f"-Wl,-rpath,{library}"],
        check=True,
    )  # fmt: skip
    run = subprocess.run([str(binary), "2"], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    return run.stdout


@pytest.mark.skipif(shutil.which("gcc") is None, reason="no C compiler on this machine")
def test_every_batch_size_is_bit_identical_to_the_single_token_kernel(tmp_path):
    out = run_c_test(PATCHES / "test-mul-mat-batch-invariance.c", tmp_path)
    assert "every element bit-identical to its one-row, one-column reference" in out


@pytest.mark.skipif(shutil.which("gcc") is None, reason="no C compiler on this machine")
def test_soft_max_finds_every_rows_maximum_and_keeps_each_row_as_computed_alone(tmp_path):
    out = run_c_test(PATCHES / "test-soft-max-maximum.c", tmp_path)
    assert "every row's maximum found, every row as computed alone" in out


@pytest.mark.skipif(shutil.which("gcc") is None, reason="no C compiler on this machine")
def test_what_attentions_mask_lets_the_kernels_skip_changes_no_value_that_is_read(tmp_path):
    out = run_c_test(PATCHES / "test-attention-mask-skip.c", tmp_path)
    assert "every value read bit-identical with and without the skips" in out

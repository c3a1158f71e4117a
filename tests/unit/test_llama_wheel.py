"""make install's llama-cpp-python wheel: the patch set's name, which keys the wheelhouse."""

import importlib.util
import shutil
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "llama_wheel.py"
spec = importlib.util.spec_from_file_location("llama_wheel", SCRIPT)
wheel_script = importlib.util.module_from_spec(spec)
spec.loader.exec_module(wheel_script)


def copy_of_the_patches(tmp_path: Path) -> Path:
    patches = tmp_path / "patches"
    shutil.copytree(wheel_script.PATCHES, patches)
    return patches


def test_the_repository_ships_a_patch_set():
    assert wheel_script.patch_files(), "patches/llama.cpp holds no .patch file"
    name = wheel_script.patch_set()
    assert name.startswith("bi.") and len(name) == 15


def test_the_same_patches_give_the_same_name(tmp_path):
    assert wheel_script.patch_set(copy_of_the_patches(tmp_path)) == wheel_script.patch_set()


def test_changing_one_byte_of_a_patch_changes_the_name(tmp_path):
    patches = copy_of_the_patches(tmp_path)
    first = wheel_script.patch_files(patches)[0]
    first.write_bytes(first.read_bytes() + b"\n")
    assert wheel_script.patch_set(patches) != wheel_script.patch_set()


def test_renaming_adding_or_removing_a_patch_changes_the_name(tmp_path):
    patches = copy_of_the_patches(tmp_path)
    first = wheel_script.patch_files(patches)[0]
    names = {wheel_script.patch_set(patches)}
    first.rename(patches / ("9999-" + first.name))
    names.add(wheel_script.patch_set(patches))
    (patches / "0000-extra.patch").write_text("--- a/x\n+++ b/x\n")
    names.add(wheel_script.patch_set(patches))
    for path in wheel_script.patch_files(patches):
        path.unlink()
    names.add(wheel_script.patch_set(patches))
    assert len(names) == 4


def test_files_beside_the_patches_do_not_change_the_name(tmp_path):
    patches = copy_of_the_patches(tmp_path)
    (patches / "NOTES.md").write_text("not a patch")
    assert wheel_script.patch_set(patches) == wheel_script.patch_set()

"""A model's identity hashes its tokenizer, config and chat template apart from its weights, so
a record names what changed when only one of them did (GGUF metadata and Hugging Face files)."""

import hashlib
import os

import numpy as np
import pytest
from gguf import GGUFWriter

from decoding.engine.weights import component_hashes, text_sha256, weights_sha256

TEMPLATE = "{% for m in messages %}{{ m['content'] }}{% endfor %}"


def write_gguf(path, *, tokens=("<s>", "a", "b"), template=TEMPLATE, heads=4, file_type=None):
    writer = GGUFWriter(str(path), "llama")
    writer.add_block_count(1)
    if file_type is not None:
        writer.add_file_type(file_type)
    writer.add_head_count(heads)
    writer.add_tokenizer_model("llama")
    writer.add_token_list(list(tokens))
    writer.add_bos_token_id(0)
    if template is not None:
        writer.add_chat_template(template)
    writer.add_tensor("token_embd.weight", np.zeros((len(tokens), 4), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_each_part_of_a_gguf_is_hashed_apart(tmp_path):
    base = component_hashes(write_gguf(tmp_path / "base.gguf"))
    assert base["chat_template_sha256"] == hashlib.sha256(TEMPLATE.encode()).hexdigest()
    other_template = component_hashes(write_gguf(tmp_path / "t.gguf", template="{{ x }}"))
    other_tokens = component_hashes(write_gguf(tmp_path / "v.gguf", tokens=("<s>", "a", "c")))
    other_config = component_hashes(write_gguf(tmp_path / "c.gguf", heads=8))
    changed = {
        name: [key for key in base if base[key] != hashes[key]]
        for name, hashes in (
            ("template", other_template),
            ("tokens", other_tokens),
            ("config", other_config),
        )
    }
    assert changed == {
        "template": ["chat_template_sha256"],
        "tokens": ["tokenizer_sha256"],
        "config": ["config_sha256"],
    }
    assert (
        component_hashes(write_gguf(tmp_path / "none.gguf", template=None))["chat_template_sha256"]
        == ""
    )


def test_a_hugging_face_directory_hashes_its_tokenizer_and_config_files(tmp_path):
    (tmp_path / "config.json").write_text('{"n_layer": 1}')
    (tmp_path / "tokenizer.json").write_text('{"model": {"vocab": {"a": 0}}}')
    (tmp_path / "model.safetensors").write_bytes(b"weights")
    first = component_hashes(tmp_path, TEMPLATE)
    assert first["config_sha256"] == hashlib.sha256(b'{"n_layer": 1}').hexdigest()
    assert first["chat_template_sha256"] == text_sha256(TEMPLATE)
    (tmp_path / "tokenizer.json").write_text('{"model": {"vocab": {"b": 0}}}')
    second = component_hashes(tmp_path, TEMPLATE)
    assert second["tokenizer_sha256"] != first["tokenizer_sha256"]
    assert second["config_sha256"] == first["config_sha256"]


@pytest.mark.parametrize("missing", ["nowhere.gguf", "nothing"])
def test_a_path_with_no_model_files_has_empty_hashes(tmp_path, missing):
    assert set(component_hashes(tmp_path / missing).values()) == {""}


def test_a_ggufs_parts_are_kept_under_its_sha256_so_a_rewritten_file_is_read_again(tmp_path):
    cache = tmp_path / "cache"
    path = write_gguf(tmp_path / "model.gguf")
    first = component_hashes(path, cache_dir=cache)
    assert first == component_hashes(path)  # the same hashes as reading the file
    (entry,) = (cache / "components").iterdir()
    assert entry.name == f"{weights_sha256(path)}.json"
    assert component_hashes(path, cache_dir=cache) == first  # from the entry
    # The same path rewritten with another template: another SHA-256, so another entry.
    os.utime(write_gguf(path, template="{{ y }}"), ns=(0, 0))
    rewritten = component_hashes(path, cache_dir=cache)
    assert rewritten["chat_template_sha256"] == hashlib.sha256(b"{{ y }}").hexdigest()
    assert len(list((cache / "components").iterdir())) == 2
    # A damaged entry is read past, not believed.
    (cache / "components" / f"{weights_sha256(path)}.json").write_text("{not json")
    assert component_hashes(path, cache_dir=cache) == rewritten


def test_a_ggufs_file_type_is_named_as_llama_cpp_names_it(tmp_path):
    assert component_hashes(write_gguf(tmp_path / "q8.gguf", file_type=7))["file_type"] == "Q8_0"
    assert component_hashes(write_gguf(tmp_path / "f16.gguf", file_type=1))["file_type"] == "F16"
    assert component_hashes(write_gguf(tmp_path / "none.gguf"))["file_type"] == ""
    other = component_hashes(write_gguf(tmp_path / "q41.gguf", file_type=3))
    assert other["file_type"] == "Q4_1"
    # Still part of the config hash, as it was before it was named apart.
    q8 = component_hashes(tmp_path / "q8.gguf")
    assert other["config_sha256"] != q8["config_sha256"]

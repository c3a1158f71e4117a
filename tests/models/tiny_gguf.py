"""Write a tiny Hugging Face Llama (the tests' random models) as a GGUF file for llama.cpp.

The tensors are mapped and the attention q/k rows permuted exactly as llama.cpp's
convert_hf_to_gguf.py does for the llama architecture, so both runtimes compute the same
network; all weights stay float32. The word-level vocabulary is written as a SentencePiece
("llama") vocabulary of the same tokens in the same order: the tests hand the models token ids,
so only the ids and their count must agree with the transformers tokenizer.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

# gguf's token types (llama.cpp's llama_token_type): what a vocabulary entry is.
_NORMAL, _UNKNOWN, _CONTROL = 1, 2, 3

_LAYER_TENSORS = {
    "input_layernorm": "attn_norm",
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output",
    "post_attention_layernorm": "ffn_norm",
    "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
}


def _permute(weights: np.ndarray, heads: int) -> np.ndarray:
    """HF's rotary layout (halves) to llama.cpp's (interleaved pairs), per head."""
    rows = weights.shape[0]
    return (
        weights.reshape(heads, 2, rows // heads // 2, *weights.shape[1:])
        .swapaxes(1, 2)
        .reshape(weights.shape)
    )


def write_llama_gguf(model_dir: Path, out: Path) -> Path:
    import gguf
    from safetensors.numpy import load_file

    config = json.loads((model_dir / "config.json").read_text())
    vocab = json.loads((model_dir / "tokenizer.json").read_text())["model"]["vocab"]
    tokens = sorted(vocab, key=vocab.get)
    assert (
        [vocab[t] for t in tokens] == list(range(len(tokens))) == list(range(config["vocab_size"]))
    )
    weights = load_file(model_dir / "model.safetensors")
    heads, kv_heads = config["num_attention_heads"], config["num_key_value_heads"]
    hidden, layers = config["hidden_size"], config["num_hidden_layers"]

    writer = gguf.GGUFWriter(str(out), "llama")
    writer.add_name(model_dir.name)
    writer.add_context_length(config["max_position_embeddings"])
    writer.add_embedding_length(hidden)
    writer.add_block_count(layers)
    writer.add_feed_forward_length(config["intermediate_size"])
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_rope_dimension_count(hidden // heads)
    writer.add_rope_freq_base(float(config.get("rope_theta", 10000.0)))
    writer.add_layer_norm_rms_eps(config["rms_norm_eps"])
    writer.add_vocab_size(len(tokens))
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)

    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores([0.0] * len(tokens))
    special = {config["bos_token_id"], config["eos_token_id"]}
    writer.add_token_types(
        [
            _UNKNOWN if token == "<unk>" else _CONTROL if vocab[token] in special else _NORMAL
            for token in tokens
        ]
    )
    writer.add_unk_token_id(vocab["<unk>"])
    writer.add_bos_token_id(config["bos_token_id"])
    writer.add_eos_token_id(config["eos_token_id"])
    writer.add_add_bos_token(True)

    def tensor(name: str, array: np.ndarray) -> None:
        writer.add_tensor(name, np.ascontiguousarray(array, dtype=np.float32))

    tensor("token_embd.weight", weights["model.embed_tokens.weight"])
    for layer in range(layers):
        for hf_name, gguf_name in _LAYER_TENSORS.items():
            array = weights[f"model.layers.{layer}.{hf_name}.weight"]
            if gguf_name == "attn_q":
                array = _permute(array, heads)
            elif gguf_name == "attn_k":
                array = _permute(array, kv_heads)
            tensor(f"blk.{layer}.{gguf_name}.weight", array)
    tensor("output_norm.weight", weights["model.norm.weight"])
    tensor("output.weight", weights["lm_head.weight"])

    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return out

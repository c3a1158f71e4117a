"""Real and tiny models for the provider tests; no Django, no network.

The tiny models are random Llamas built here (2 and 4 layers, one shared word-level
tokenizer), small enough that thousands of generations run in seconds.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from decoding.engine import AuditSink, StepRecord
from decoding.engine.weights import default_gguf_path

# Set before any test module imports transformers, which reads it once: never the model hub.
os.environ.setdefault("HF_HUB_OFFLINE", "1")

# The tiny models' vocabulary, after <unk>, <s>, </s>: one token per word.
VOCABULARY_TEXT = (
    "the a cat dog sat on mat ran to and big small red blue it was is fast slow home park saw "
    "bird tree sun day night"
)
SPECIALS = ["<unk>", "<s>", "</s>"]
# One thread per model runtime. Both llama.cpp's and torch's worker threads spin while they
# wait, so on two cores shared with anything else a second thread made these tests 10-30x
# slower; llama.cpp's logits are identical with 1 and 2 threads.
THREADS = 1

# The output layer scaled so random logits spread over a few units, as a trained model's do:
# at init they all lie within ~0.3 and every distribution is near uniform.
LOGIT_SCALE = 15.0


class ListSink(AuditSink):
    """An audit sink that commits records to a list."""

    def __init__(self) -> None:
        self.records: list[StepRecord] = []

    def record(self, record: StepRecord) -> None:
        self.records.append(record)


@pytest.fixture(scope="session", autouse=True)
def one_torch_thread():
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(THREADS)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def sink() -> ListSink:
    return ListSink()


@pytest.fixture(scope="session")
def gguf_path() -> Path:
    return default_gguf_path()


@pytest.fixture(scope="session")
def served_gguf(gguf_path, tmp_path_factory) -> Path:
    """The file the default spec serves: the shipped GGUF requantized to Q8_0, as
    decoding.kinds.files.default_model_file() makes it (PATHFINDER_DEFAULT_GGUF_TYPE's default)."""
    from decoding.engine.model_files import requantized

    return requantized(gguf_path, tmp_path_factory.mktemp("model-cache"), "Q8_0").path


@pytest.fixture(scope="session")
def make_llama(gguf_path):
    """A new LlamaCppProvider per call: the shipped model, or the file at path (options: n_batch,
    n_ctx)."""
    from decoding.engine.providers.llamacpp import LlamaCppProvider

    return lambda path=gguf_path, **options: LlamaCppProvider(
        path, name="smollm2-135m", n_threads=THREADS, **options
    )


def _tiny_tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {token: i for i, token in enumerate(SPECIALS + VOCABULARY_TEXT.split())}
    tokenizer = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.post_processor = processors.TemplateProcessing(
        single="<s> $A", special_tokens=[("<s>", vocab["<s>"])]
    )
    tokenizer.decoder = decoders.WordPiece()  # joins words with spaces
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, bos_token="<s>", eos_token="</s>", unk_token="<unk>"
    )


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory) -> dict[str, Path]:
    """Directories of two random Llamas sharing a tokenizer: "tiny2" (draft), "tiny4" (target).

    tiny2 is tiny4 with its last two layers skipped, so it agrees with tiny4 often but not
    always, as a distilled draft does.
    """
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = _tiny_tokenizer()
    root = tmp_path_factory.mktemp("tiny-models")
    models = {}
    for layers in (4, 2):
        config = LlamaConfig(
            vocab_size=len(tokenizer),
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=layers,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=256,
            bos_token_id=tokenizer.bos_token_id,
            eos_token_id=tokenizer.eos_token_id,
            tie_word_embeddings=False,
        )
        torch.manual_seed(0)
        model = LlamaForCausalLM(config)
        if layers == 4:
            with torch.no_grad():
                model.lm_head.weight.mul_(LOGIT_SCALE)
            target = model
        else:  # tiny4 without its last two layers; their weights are ignored (strict=False)
            model.load_state_dict(target.state_dict(), strict=False)
        directory = root / f"tiny{layers}"
        model.save_pretrained(directory)
        tokenizer.save_pretrained(directory)
        models[f"tiny{layers}"] = directory
    return models


@pytest.fixture(scope="session")
def tiny_ggufs(tiny_models, tmp_path_factory) -> dict[str, Path]:
    """The same two random Llamas as GGUF files for llama.cpp (float32, same token ids)."""
    from .tiny_gguf import write_llama_gguf

    root = tmp_path_factory.mktemp("tiny-ggufs")
    return {
        name: write_llama_gguf(path, root / f"{name}.gguf") for name, path in tiny_models.items()
    }

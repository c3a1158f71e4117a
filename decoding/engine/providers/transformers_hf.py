"""A causal language model run by Hugging Face transformers on torch (CUDA or CPU).

Named transformers_hf, not transformers, so that it never shadows the library it imports.
Written against transformers 5 (`cache=` forward argument, `DynamicCache.crop(-n)`, `GgufConfig`).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import threading
from collections.abc import Hashable, Sequence
from pathlib import Path

import numpy as np
import torch
import transformers
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    DynamicCache,
    GgufConfig,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)

from ..tokenizer import Tokenizer
from ..weights import component_hashes, weights_sha256
from .base import NO_WALL, ModelIdentity, Provider, Walled, common_prefix

# One forward pass at a time in this process, across every TransformersProvider: torch's
# intra-op threads already use every core, so a draft and a target running at once would only
# contend for them. The lock also keeps each provider's record of its KV cache consistent.
_MODEL_CALLS = threading.Lock()


class HFTokenizer(Tokenizer):
    """An AutoTokenizer seen through the engine's Tokenizer contract."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase) -> None:
        self._tokenizer = tokenizer
        self.vocab_size = len(tokenizer)
        self.bos_token_id = tokenizer.bos_token_id
        self.eos_token_id = tokenizer.eos_token_id
        self.chat_template = tokenizer.chat_template
        self._special = frozenset(tokenizer.all_special_ids)
        self._grammar_tokenizer = None

    def encode(
        self, text: str, *, add_special: bool = True, parse_special: bool = True
    ) -> list[int]:
        return list(
            self._tokenizer.encode(
                text, add_special_tokens=add_special, split_special_tokens=not parse_special
            )
        )

    def decode(self, token_ids: Sequence[int]) -> str:
        return self._tokenizer.decode(list(token_ids), skip_special_tokens=True)

    def render(self, token_ids: Sequence[int]) -> str:
        return self._tokenizer.decode(
            list(token_ids), skip_special_tokens=False, clean_up_tokenization_spaces=False
        )

    def piece(self, token_id: int) -> str:
        return "" if token_id in self._special else self.token_text(token_id)

    def grammar_tokenizer(self):
        if self._grammar_tokenizer is None:
            from llguidance.hf import from_tokenizer

            self._grammar_tokenizer = from_tokenizer(self._tokenizer, n_vocab=self.vocab_size)
        return self._grammar_tokenizer

    def token_text(self, token_id: int) -> str:
        # convert_tokens_to_string keeps a piece's leading space, which decode([id]) strips for
        # some tokenizers. Ids past the tokenizer (a model's padded vocabulary rows) have no text.
        token = self._tokenizer.convert_ids_to_tokens(token_id)
        return "" if token is None else self._tokenizer.convert_tokens_to_string([token])


def _load(
    directory: Path, gguf_file: str | None, dtype: torch.dtype
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    gguf = {}
    if gguf_file is not None:
        # Dense weights: the packed-GGUF kernels are optional, and a dense model can be saved.
        gguf = {"gguf_file": gguf_file, "quantization_config": GgufConfig(dequantize=True)}
    model = AutoModelForCausalLM.from_pretrained(
        directory, dtype=dtype, local_files_only=True, **gguf
    )
    tokenizer = AutoTokenizer.from_pretrained(directory, local_files_only=True, gguf_file=gguf_file)
    return model, tokenizer


def _convert_once(gguf: Path, sha256: str, cache_dir: Path) -> Path:
    """The GGUF as a safetensors directory under cache_dir/<sha256 of the GGUF>/.

    Dequantizing a GGUF takes transformers tens of seconds; reloading the saved result takes
    well under one. Written to a temporary directory and renamed into place, so a crash or a
    second process converting at the same time never leaves a half-written model behind.
    """
    target = cache_dir / sha256
    if target.is_dir():
        return target
    cache_dir.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".{sha256[:12]}-", dir=cache_dir))
    try:
        # float32 holds every dequantized weight exactly, whatever dtype a later load asks for.
        model, tokenizer = _load(gguf.parent, gguf.name, torch.float32)
        quantizer = getattr(model, "hf_quantizer", None)
        if quantizer is not None:
            # The weights are dense already; only the marker that forbids saving them goes.
            quantizer.remove_quantization_config(model)
        model.save_pretrained(scratch)
        tokenizer.save_pretrained(scratch)
        # What the converted weights hash to, so a later load can tell they are still these.
        (scratch / CONVERSION_RECORD).write_text(
            json.dumps({"gguf_sha256": sha256, "converted_sha256": weights_sha256(scratch)})
        )
        try:
            scratch.rename(target)
        except OSError:
            if not target.is_dir():  # not "another process got there first"
                raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return target


CONVERSION_RECORD = "pathfinder-conversion.json"


def _verify_conversion(directory: Path, gguf_sha256: str) -> str:
    """The converted weights' SHA-256, re-hashed and checked against what the conversion
    recorded: a cache edited or corrupted since is refused, never loaded as the GGUF's weights."""
    try:
        recorded = json.loads((directory / CONVERSION_RECORD).read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(
            f"converted cache {directory} has no readable {CONVERSION_RECORD}: delete the "
            "directory to convert the GGUF again"
        ) from exc
    actual = weights_sha256(directory)
    if recorded.get("gguf_sha256") != gguf_sha256 or recorded.get("converted_sha256") != actual:
        raise ValueError(
            f"converted cache {directory} does not hold the conversion it recorded (weights "
            f"{actual}): delete the directory to convert the GGUF again"
        )
    return actual


class TransformersProvider(Provider):
    """A transformers causal LM whose KV cache holds the prefix shared with the previous call.

    `path` is a local Hugging Face model directory, or a GGUF file (or a directory with
    `gguf_file` naming one in it). A GGUF is dequantized by transformers; with a cache_dir the
    result is saved once as safetensors and reloaded from there afterwards.

    vocab_size is the width of the logits, i.e. of the output layer, which can exceed the
    tokenizer's length (vocabularies padded to a multiple of 64 or 128); tokenizer.vocab_size
    is the tokenizer's. The engine pairs a draft and a target only if their vocab_size agree,
    so two models sharing a tokenizer but padded differently are refused: their ids do name
    the same tokens, but q and p would differ in width. Such a pair is refused, never misread.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        name: str,
        revision: str = "",
        gguf_file: str | None = None,
        cache_dir: str | os.PathLike[str] | None = None,
        device: str | torch.device | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        directory = Path(path)
        if directory.is_file():
            directory, gguf_file = directory.parent, directory.name
        weights = directory / gguf_file if gguf_file else directory
        sha256 = weights_sha256(weights)
        converted = ""
        if gguf_file is not None and cache_dir is not None:
            directory, gguf_file = _convert_once(weights, sha256, Path(cache_dir)), None
            converted = _verify_conversion(directory, sha256)

        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        # bfloat16 halves memory and uses the tensor cores on a GPU; CPUs are fastest in float32.
        self.dtype = dtype or (torch.bfloat16 if self.device.type == "cuda" else torch.float32)
        model, tokenizer = _load(directory, gguf_file, self.dtype)
        self._model = model.to(self.device).eval()
        self.tokenizer = HFTokenizer(tokenizer)
        self.vocab_size = int(self._model.get_output_embeddings().weight.shape[0])
        self._cache = DynamicCache()
        self._cached: list[int] = []  # the tokens whose keys and values the cache holds
        self._wall: Hashable = NO_WALL  # whose call put them there (Provider.walled)
        self.tokens_evaluated = 0
        self.identity = ModelIdentity(
            name=name,
            revision=revision,
            sha256=sha256,
            runtime="transformers",
            # Device and dtype change the numerics, so they are part of the identity.
            runtime_version=(
                f"{transformers.__version__}+torch{torch.__version__}"
                f" {self.device.type}/{str(self.dtype).removeprefix('torch.')}"
            ),
            converted_sha256=converted,
            **component_hashes(
                directory / gguf_file if gguf_file else directory, tokenizer.chat_template
            ),
        )

    def walled(self, wall: Hashable) -> Provider:
        return Walled(self, wall)

    def prefill(self, context: Sequence[int], *, wall: Hashable = NO_WALL) -> int:
        # The last prompt token is left for the first logits call, which needs its logits.
        prompt = list(context[:-1])
        with _MODEL_CALLS:
            self._enter(wall)
            reused = common_prefix(self._cached, prompt)
            self._evaluate(prompt, 0)
        return reused

    def logits(
        self, context: Sequence[int], num_positions: int, *, wall: Hashable = NO_WALL
    ) -> np.ndarray:
        with _MODEL_CALLS:
            self._enter(wall)
            return self._evaluate(list(context), num_positions)

    def forget_wall(self, wall: Hashable) -> None:
        with _MODEL_CALLS:
            if self._wall == wall:
                self._cache, self._cached, self._wall = DynamicCache(), [], NO_WALL

    def _enter(self, wall: Hashable) -> None:
        """Empty the KV cache when another wall's call filled it (under _MODEL_CALLS)."""
        if wall != self._wall:
            self._cache, self._cached, self._wall = DynamicCache(), [], wall

    @torch.inference_mode()
    def _evaluate(self, tokens: list[int], outputs: int) -> np.ndarray:
        """Bring the KV cache to `tokens`; return logits for its last `outputs` positions."""
        if not 0 <= outputs <= len(tokens):
            raise ValueError(f"{outputs} positions asked of a context of {len(tokens)} tokens")
        # The last `outputs` tokens are evaluated even if cached: logits come only for inputs.
        start = min(common_prefix(self._cached, tokens), len(tokens) - outputs)
        if start < len(self._cached):
            self._cache.crop(start - len(self._cached))  # a negative count removes that many
            del self._cached[start:]
        new = tokens[start:]
        if not new:
            return np.empty((0, self.vocab_size), dtype=np.float32)
        try:
            result = self._model(
                input_ids=torch.tensor([new], device=self.device),
                cache=self._cache,
                use_cache=True,
                logits_to_keep=max(outputs, 1),  # 0 would mean every position
            )
        except BaseException:
            # Layers before the failure have appended to the cache: it no longer matches.
            self._cache, self._cached = DynamicCache(), []
            raise
        self._cached.extend(new)
        self.tokens_evaluated += len(new)
        if outputs == 0:
            return np.empty((0, self.vocab_size), dtype=np.float32)
        return result.logits[0, -outputs:].float().cpu().numpy()

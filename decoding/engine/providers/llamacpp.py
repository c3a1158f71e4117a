"""A GGUF model run by llama.cpp, through llama-cpp-python's low-level batch API.

The high-level `Llama` object only loads the model, context and vocabulary. Evaluation goes
through `llama_batch`/`llama_decode` directly so that the output layer (49k wide for SmolLM2,
most of a small model's cost) runs only for the positions a call asks for, never for every
prompt token as `logits_all=True` would.
"""

from __future__ import annotations

import ctypes
import os
import weakref
from collections.abc import Hashable, Sequence

import llama_cpp
import numpy as np

from ..model_files import source_sha256
from ..tokenizer import Tokenizer
from ..weights import component_hashes, weights_sha256
from .base import NO_WALL, ModelIdentity, Provider, Walled, common_prefix
from .model_thread import MODEL_THREAD
from .prompt_cache import PromptCache, SavedPrompt

_SEQUENCE = 0  # one sequence in the cache: the prefix shared with the last call, any request's


def build_features() -> str:
    """What the loaded llama.cpp was built with, as llama.cpp reports it ("AVX2 FMA ... REPACK"):
    a decision's logits depend on the kernels, so records name them beside the version."""
    info = llama_cpp.llama_print_system_info().decode("utf-8", errors="replace")
    features = []
    for item in info.replace("|", "\n").splitlines():
        name, _, value = item.rpartition("=")
        name = name.split(":")[-1].strip()
        if name and value.strip() == "1":
            features.append(name)
    return " ".join(dict.fromkeys(features))


def runtime_version() -> str:
    return f"{llama_cpp.__version__} ({build_features()})"


def fill_batch(batch, tokens: Sequence[int], start: int, first_output: int) -> None:
    """Put tokens at positions start.. of the one sequence into a llama_batch, asking for the
    logits of every position from first_output on."""
    batch.n_tokens = len(tokens)
    for i, token in enumerate(tokens):
        batch.token[i] = token
        batch.pos[i] = start + i
        batch.n_seq_id[i] = 1
        batch.seq_id[i][0] = _SEQUENCE
        batch.logits[i] = start + i >= first_output


def logits_rows(ctx, batch_indices: range, vocab_size: int) -> np.ndarray:
    """A copy of the logits llama.cpp returned for consecutive positions of the last batch, in
    one copy: for one sequence's trailing positions its output buffer holds them as consecutive
    rows (checked: a copy per row and a stack would pass over every row twice)."""
    pointers = [llama_cpp.llama_get_logits_ith(ctx, i) for i in batch_indices]
    addresses = [ctypes.addressof(pointer.contents) for pointer in pointers]
    row_bytes = vocab_size * ctypes.sizeof(ctypes.c_float)
    if any(b - a != row_bytes for a, b in zip(addresses, addresses[1:], strict=False)):
        raise RuntimeError("llama.cpp returned a batch's logits out of order")
    return np.ctypeslib.as_array(pointers[0], shape=(len(pointers), vocab_size)).copy()


def save_prompt(
    ctx, sequence: int, prompts: PromptCache, prompt: list[int], wall: Hashable
) -> None:
    """Keep the KV state of `sequence`, which holds exactly `prompt`, in the prompt cache for
    `wall`'s later prompts."""
    size = llama_cpp.llama_state_seq_get_size(ctx, sequence)
    if size > prompts.capacity_bytes:
        return
    state = (ctypes.c_uint8 * size)()
    written = llama_cpp.llama_state_seq_get_data(ctx, state, size, sequence)
    if written:
        prompts.put(prompt, state, written, wall=wall)


def restore_prompt(ctx, sequence: int, saved: SavedPrompt) -> bool:
    """Make `sequence` hold exactly the saved prompt; False (the sequence emptied) if it cannot.
    A state saved from one context restores into any sequence of another on the same model."""
    memory = llama_cpp.llama_get_memory(ctx)
    llama_cpp.llama_memory_seq_rm(memory, sequence, -1, -1)
    if not llama_cpp.llama_state_seq_set_data(ctx, saved.state, saved.nbytes, sequence):
        llama_cpp.llama_memory_seq_rm(memory, sequence, -1, -1)
        return False
    return True


def _token_or_none(token: int) -> int | None:
    return None if token == llama_cpp.LLAMA_TOKEN_NULL else int(token)


class LlamaCppTokenizer(Tokenizer):
    """The vocabulary stored in the GGUF file, so tokens and model can never disagree."""

    def __init__(self, llama: llama_cpp.Llama) -> None:
        self._llama = llama  # the vocabulary lives inside the model: keep the model alive
        self._vocab = llama_cpp.llama_model_get_vocab(llama.model)
        self.vocab_size = int(llama_cpp.llama_vocab_n_tokens(self._vocab))
        self.bos_token_id = _token_or_none(llama_cpp.llama_vocab_bos(self._vocab))
        self.eos_token_id = _token_or_none(llama_cpp.llama_vocab_eos(self._vocab))
        self.chat_template = llama.metadata.get("tokenizer.chat_template")
        self._grammar_tokenizer = None

    def encode(
        self, text: str, *, add_special: bool = True, parse_special: bool = True
    ) -> list[int]:
        # With parse_special, special tokens written as text (<|im_start|> in a rendered chat
        # template) become the special token, as Hugging Face tokenizers do.
        data = text.encode("utf-8")
        capacity = len(data) + 2  # a token covers at least one byte; room for BOS and EOS
        while True:
            buffer = (llama_cpp.llama_token * capacity)()
            n = llama_cpp.llama_tokenize(
                self._vocab, data, len(data), buffer, capacity, add_special, parse_special
            )
            if n >= 0:
                return list(buffer[:n])
            capacity = -n  # too small: llama.cpp says how many it needs

    def decode(self, token_ids: Sequence[int]) -> str:
        return self._detokenize(token_ids, remove_special=True, unparse_special=False)

    def render(self, token_ids: Sequence[int]) -> str:
        return self._detokenize(token_ids, remove_special=False, unparse_special=True)

    def _detokenize(self, token_ids, *, remove_special: bool, unparse_special: bool) -> str:
        tokens = (llama_cpp.llama_token * len(token_ids))(*token_ids)
        capacity = 8 * len(token_ids) + 16
        while True:
            buffer = ctypes.create_string_buffer(capacity)
            n = llama_cpp.llama_detokenize(
                self._vocab, tokens, len(token_ids), buffer, capacity, remove_special,
                unparse_special,
            )  # fmt: skip
            if n >= 0:
                return buffer.raw[:n].decode("utf-8", errors="replace")
            capacity = -n

    def _piece_bytes(self, token_id: int, special: bool) -> bytes:
        capacity = 32
        while True:
            buffer = ctypes.create_string_buffer(capacity)
            n = llama_cpp.llama_token_to_piece(self._vocab, token_id, buffer, capacity, 0, special)
            if n >= 0:
                return buffer.raw[:n]
            capacity = -n

    def piece(self, token_id: int) -> str:
        return self._piece_bytes(token_id, False).decode("utf-8", errors="replace")

    def token_text(self, token_id: int) -> str:
        return self._piece_bytes(token_id, True).decode("utf-8", errors="replace")

    def grammar_tokenizer(self):
        if self._grammar_tokenizer is None:
            # llguidance's own reading of a llama.cpp vocabulary (control tokens marked apart).
            from llguidance.llamacpp import lltokenizer_from_vocab

            self._grammar_tokenizer = lltokenizer_from_vocab(self._vocab)
        return self._grammar_tokenizer

    def token_to_piece(self, token_id: int) -> bytes:
        """The token's raw bytes (a partial UTF-8 character stays as it is)."""
        return self._piece_bytes(token_id, False)


class LlamaCppProvider(Provider):
    """A GGUF model whose KV cache holds the longest prefix shared with the previous call.

    Each call removes the cache's divergent tail and evaluates only the new tokens, plus the
    last num_positions tokens again if they were cached: llama.cpp returns logits only for
    tokens in the batch being decoded. `tokens_evaluated` counts every token decoded, so the
    cache's effect can be checked.

    With prompt_cache_bytes > 0 the provider also keeps the KV states of recent prompts
    (PromptCache): a prefill restores the saved state sharing the longest prefix with its prompt
    when that beats what the live cache holds, and saves the state after each new prompt.

    Both caches are walled (Provider.walled): a call behind another wall than the live cache's
    empties it first, and finds only its own wall's saved prompts.
    """

    def __init__(
        self,
        model_path: str | os.PathLike[str],
        *,
        name: str,
        revision: str = "",
        n_threads: int | None = None,
        n_ctx: int = 4096,
        n_batch: int = 512,
        prompt_cache_bytes: int = 0,
        cache_dir: str | os.PathLike[str] | None = None,
    ) -> None:
        self._llama = llama_cpp.Llama(
            model_path=os.fspath(model_path),
            n_ctx=n_ctx,
            n_batch=n_batch,
            n_threads=n_threads,
            n_threads_batch=n_threads,
            logits_all=False,
            verbose=False,
        )
        self._ctx = self._llama.ctx
        self._memory = llama_cpp.llama_get_memory(self._ctx)
        self._n_ctx = self._llama.n_ctx()
        self._n_batch = n_batch
        self._batch = llama_cpp.llama_batch_init(n_batch, 0, 1)
        weakref.finalize(self, llama_cpp.llama_batch_free, self._batch)
        self._cached: list[int] = []  # the tokens whose keys and values the KV cache holds
        self._wall: Hashable = NO_WALL  # whose call put them there
        self._prompts = PromptCache(prompt_cache_bytes) if prompt_cache_bytes > 0 else None
        self.tokens_evaluated = 0
        self.vocab_size = self._llama.n_vocab()
        self.tokenizer = LlamaCppTokenizer(self._llama)
        self.identity = ModelIdentity(
            name=name,
            revision=revision,
            sha256=weights_sha256(model_path),
            runtime="llama.cpp",
            runtime_version=runtime_version(),
            source_sha256=source_sha256(model_path),
            **component_hashes(model_path, cache_dir=cache_dir),
        )

    @property
    def model(self):
        """The loaded llama.cpp model (a SequenceEngine makes its own context on it)."""
        return self._llama.model

    @property
    def context_params(self) -> llama_cpp.llama_context_params:
        """The parameters this provider's context was made with (threads, batch, cache types)."""
        return self._llama.context_params

    @property
    def n_ctx(self) -> int:
        return self._n_ctx

    @property
    def n_batch(self) -> int:
        return self._n_batch

    @property
    def prompt_cache(self) -> PromptCache | None:
        return self._prompts

    def walled(self, wall: Hashable) -> Provider:
        return Walled(self, wall)

    def prefill(self, context: Sequence[int], *, wall: Hashable = NO_WALL) -> int:
        # The last prompt token is left for the first logits call, which needs its logits.
        return MODEL_THREAD.run(self._prefill, list(context[:-1]), wall)

    def _prefill(self, prompt: list[int], wall: Hashable) -> int:
        self._enter(wall)
        reused = common_prefix(self._cached, prompt)
        if self._prompts is not None:
            hit = self._prompts.longest(prompt, wall=wall)
            if hit is not None and hit.shared > reused:
                self._cached.clear()
                if restore_prompt(self._ctx, _SEQUENCE, hit.saved):
                    self._cached.extend(hit.saved.tokens)
                    reused = hit.shared
        self._evaluate(prompt, 0)
        if self._prompts is not None and reused < len(prompt):
            save_prompt(self._ctx, _SEQUENCE, self._prompts, prompt, wall)
        return reused

    def logits(
        self, context: Sequence[int], num_positions: int, *, wall: Hashable = NO_WALL
    ) -> np.ndarray:
        # On the model thread, which also keeps this provider's record of its KV cache
        # consistent with the cache itself, and checks the wall in the same turn.
        return MODEL_THREAD.run(self._walled_evaluate, list(context), num_positions, wall)

    def _walled_evaluate(self, tokens: list[int], outputs: int, wall: Hashable) -> np.ndarray:
        self._enter(wall)
        return self._evaluate(tokens, outputs)

    def forget_wall(self, wall: Hashable) -> None:
        MODEL_THREAD.run(self._forget_wall, wall)

    def _forget_wall(self, wall: Hashable) -> None:
        """The wall's saved prompts, and the live cache when the wall's call filled it: its
        cells zeroed, not only marked free (on the model thread)."""
        if self._prompts is not None:
            self._prompts.forget(wall)
        if self._wall == wall:
            llama_cpp.llama_memory_clear(self._memory, True)
            self._cached.clear()
            self._wall = NO_WALL

    def _enter(self, wall: Hashable) -> None:
        """Empty the live KV cache when another wall's call filled it (on the model thread)."""
        if wall != self._wall:
            self._truncate(0)
            self._wall = wall

    def _evaluate(self, tokens: list[int], outputs: int) -> np.ndarray:
        """Bring the KV cache to `tokens`; return logits for its last `outputs` positions."""
        if len(tokens) > self._n_ctx:
            raise ValueError(f"context of {len(tokens)} tokens exceeds n_ctx {self._n_ctx}")
        if not 0 <= outputs <= len(tokens):
            raise ValueError(f"{outputs} positions asked of a context of {len(tokens)} tokens")
        first_output = len(tokens) - outputs
        start = self._truncate(min(common_prefix(self._cached, tokens), first_output))
        if any(not 0 <= token < self.vocab_size for token in tokens[start:]):
            # llama.cpp aborts the whole process on an out-of-range token: refuse it here.
            raise ValueError(f"token ids must be in 0..{self.vocab_size - 1}")
        rows = []
        for offset in range(start, len(tokens), self._n_batch):
            chunk = tokens[offset : offset + self._n_batch]
            self._decode(chunk, offset, first_output)
            wanted = range(max(first_output - offset, 0), len(chunk))
            if wanted:
                rows.append(logits_rows(self._ctx, wanted, self.vocab_size))
        if not rows:
            return np.empty((0, self.vocab_size), dtype=np.float32)
        return rows[0] if len(rows) == 1 else np.concatenate(rows)

    def _truncate(self, keep: int) -> int:
        """Drop cached positions from `keep` on; return how many cached tokens remain."""
        if keep < len(self._cached):
            if not llama_cpp.llama_memory_seq_rm(self._memory, _SEQUENCE, keep, -1):
                # Recurrent models cannot drop part of a sequence: start again from nothing.
                llama_cpp.llama_memory_clear(self._memory, True)
                keep = 0
            del self._cached[keep:]
        return keep

    def _decode(self, chunk: list[int], offset: int, first_output: int) -> None:
        batch = self._batch
        fill_batch(batch, chunk, offset, first_output)
        status = llama_cpp.llama_decode(self._ctx, batch)
        if status != 0:
            # A failed decode may leave part of the batch in the cache: forget all of it.
            llama_cpp.llama_memory_clear(self._memory, True)
            self._cached.clear()
            raise RuntimeError(f"llama_decode failed with status {status}")
        self._cached.extend(chunk)
        self.tokens_evaluated += len(chunk)

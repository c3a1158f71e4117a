"""The tokenizer contract: text in, text out; token ids stay the unit of every decision."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence


class Tokenizer(ABC):
    """A model's tokenizer. The target's tokenizer is the pair's: the draft must share it."""

    vocab_size: int
    bos_token_id: int | None
    eos_token_id: int | None
    chat_template: str | None  # Jinja2 source, as shipped with the model (None: no chat)

    @abstractmethod
    def encode(
        self, text: str, *, add_special: bool = True, parse_special: bool = True
    ) -> list[int]:
        """Token ids of text; add_special adds the model's BOS where it expects one.
        parse_special: a special token's text (<|im_start|>) becomes that token, as in a
        rendered chat template; False reads it as plain text, as any caller's content must be."""

    @abstractmethod
    def decode(self, token_ids: Sequence[int]) -> str:
        """The text of a token sequence, special tokens omitted."""

    @abstractmethod
    def piece(self, token_id: int) -> str:
        """The text one token contributes, for reviewers (a partial UTF-8 character shows as
        U+FFFD; the token id remains the record's truth)."""

    def render(self, token_ids: Sequence[int]) -> str:
        """The exact text of a token sequence with special tokens spelled out: what a model
        server, tokenising with special tokens on, turns back into these ids."""
        raise NotImplementedError(f"{type(self).__name__} cannot render text for a server")

    def token_text(self, token_id: int) -> str:
        """The token's own spelling, special tokens included (for display)."""
        return self.piece(token_id)

    def grammar_tokenizer(self):
        """This vocabulary as the grammar library reads it (engine.grammar): an
        llguidance.LLTokenizer, made once (it reads every token, ~0.5 s)."""
        raise NotImplementedError(f"{type(self).__name__} cannot constrain output to a grammar")

"""Text out: stop strings and the output text of a job."""

from __future__ import annotations

from decoding.engine import Tokenizer


class StopStrings:
    """The engine's stop condition for a job's stop strings (checked on the decoded text)."""

    def __init__(self, tokenizer: Tokenizer | None, stop: list[str]):
        self._tokenizer = tokenizer
        self._stop = stop

    def __call__(self, output_token_ids) -> bool:
        if self._tokenizer is None:
            return False
        text = self._tokenizer.decode(list(output_token_ids))
        return any(s in text for s in self._stop)


def output_text(tokenizer: Tokenizer | None, token_ids, stop: list[str]) -> str:
    """The output as text, cut before the first stop string (its tokens stay in the trail)."""
    if tokenizer is None:
        return ""
    text = tokenizer.decode(list(token_ids))
    cuts = [text.index(s) for s in stop if s in text]
    return text[: min(cuts)] if cuts else text

"""Text out: stop strings and the output text of a job."""

from __future__ import annotations

from decoding.engine import Tokenizer


class StopStrings:
    """The engine's stop condition for a job's stop strings (checked on the decoded text)."""

    def __init__(self, tokenizer: Tokenizer | None, stop: list[str]):
        self._tokenizer = tokenizer
        self._stop = stop
        # Every token decodes to at least one byte, so a stop string of n bytes that the new
        # tokens complete starts within the n tokens before them: decode only that window,
        # not the whole output at every step.
        self._reach = max(len(s.encode("utf-8")) for s in stop)
        self._checked = 0

    def __call__(self, output_token_ids) -> bool:
        if self._tokenizer is None:
            return False
        start = max(0, self._checked - self._reach)
        self._checked = len(output_token_ids)
        text = self._tokenizer.decode(list(output_token_ids[start:]))
        return any(s in text for s in self._stop)


def output_text(tokenizer: Tokenizer | None, token_ids, stop: list[str]) -> str:
    """The output as text, cut before the first stop string (its tokens stay in the trail)."""
    if tokenizer is None:
        return ""
    return _cut_at_stop(tokenizer.decode(list(token_ids)), stop)


def _cut_at_stop(text: str, stop: list[str]) -> str:
    cuts = [text.index(s) for s in stop if s in text]
    return text[: min(cuts)] if cuts else text


class TextStream:
    """A job's output text as deltas, while its committed tokens arrive.

    Holds back an incomplete UTF-8 character (it decodes as U+FFFD until its last byte comes)
    and the last characters that could still grow into a stop string, so the deltas always add
    up to a prefix of the job's final output_text.
    """

    def __init__(self, tokenizer: Tokenizer | None, stop: list[str]):
        self._tokenizer = tokenizer
        self._stop = stop
        self._hold = max((len(s) for s in stop), default=1) - 1
        self._ids: list[int] = []
        self._sent = 0

    def push(self, token_ids) -> str:
        self._ids.extend(token_ids)
        if self._tokenizer is None or not token_ids:
            return ""
        full = self._tokenizer.decode(self._ids)
        text = _cut_at_stop(full, self._stop)
        end = len(text) if len(text) < len(full) else len(text) - self._hold
        while end > self._sent and text[end - 1] == "\ufffd":
            end -= 1
        delta = text[self._sent : max(end, self._sent)]
        self._sent += len(delta)
        return delta

    def finish(self, final_text: str) -> str:
        """The rest of the job's final output text."""
        delta = final_text[self._sent :]
        self._sent = len(final_text)
        return delta

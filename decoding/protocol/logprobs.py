"""Log-probabilities for the OpenAI API, read from the decision records the trail holds.

What an application reads as the model's confidence is exactly what a reviewer can read in the
trail: each emitted token's logprob is the record's `logprobs` entry, the target's own
log-softmax at that position (before the request's temperature, top-k and top-p, as the OpenAI
API reports it, whatever the sampling), and the alternatives are the record's `target_top` (the
target's most probable tokens by the same distribution, kept only for jobs that asked, up to the
spec's top_logprobs). Nothing is recomputed from the model.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from audit.evidence.binding import emitted_from
from decoding.engine import Tokenizer

# OpenAI's stand-in for the log of a probability too small to write (JSON has no -Infinity).
LOG_ZERO = -9999.0


@dataclass(frozen=True)
class Alternative:
    token: int
    text: str
    bytes: bytes
    logprob: float


@dataclass(frozen=True)
class TokenLogprob:
    chosen: Alternative
    top: tuple[Alternative, ...]


def _log(p: str | None) -> float:
    value = float(p) if p is not None else 0.0
    return math.log(value) if value > 0 else LOG_ZERO


def _logprob(alternative: dict) -> float:
    # Records kept the sampled distribution's p before they kept the model's own logprob.
    if "logprob" in alternative:
        return float(alternative["logprob"])
    return _log(alternative.get("p"))


def _spelled(tokenizer: Tokenizer | None, token: int, text: str | None) -> tuple[str, bytes]:
    if tokenizer is None:
        return (text or "", (text or "").encode("utf-8"))
    # llama.cpp's tokenizer gives a token's raw bytes, a partial UTF-8 character included.
    to_bytes = getattr(tokenizer, "token_to_piece", None)
    raw = to_bytes(token) if to_bytes is not None else tokenizer.piece(token).encode("utf-8")
    return (text if text is not None else tokenizer.piece(token), raw)


def token_logprobs(
    payloads: Iterable[dict], tokenizer: Tokenizer | None, top: int
) -> list[TokenLogprob]:
    """One entry per token the decision payloads emitted, in order, with up to `top`
    alternatives each."""
    entries = []
    for payload in payloads:
        for emitted in emitted_from(payload):
            text, raw = _spelled(tokenizer, emitted.token, emitted.text)
            alternatives = tuple(
                Alternative(alt["token"], *_spelled(tokenizer, alt["token"], None), _logprob(alt))
                for alt in (emitted.top or [])[:top]
            )
            # The model's own log-probability, as OpenAI reports it; a record written before
            # records kept it has only the sampled distribution's p.
            logprob = float(emitted.logprob) if emitted.logprob is not None else _log(emitted.p)
            chosen = Alternative(emitted.token, text, raw, logprob)
            entries.append(TokenLogprob(chosen, alternatives))
    return entries


def chat_logprobs(entries: list[TokenLogprob]) -> dict:
    """Chat completions' `logprobs` object."""

    def shown(alt: Alternative) -> dict:
        return {"token": alt.text, "logprob": alt.logprob, "bytes": list(alt.bytes)}

    return {
        "content": [
            {**shown(entry.chosen), "top_logprobs": [shown(alt) for alt in entry.top]}
            for entry in entries
        ],
        "refusal": None,
    }


def completion_logprobs(entries: list[TokenLogprob], *, text_offset: int = 0) -> dict:
    """Legacy completions' `logprobs` object; offsets count characters from `text_offset`."""
    offsets = []
    for entry in entries:
        offsets.append(text_offset)
        text_offset += len(entry.chosen.text)
    return {
        "tokens": [entry.chosen.text for entry in entries],
        "token_logprobs": [entry.chosen.logprob for entry in entries],
        "top_logprobs": [{alt.text: alt.logprob for alt in entry.top} for entry in entries],
        "text_offset": offsets,
    }

"""A model served by an OpenAI-compatible server (llama.cpp's, vLLM), verified through prompt
log-probabilities: POST /v1/completions with `echo` and `logprobs` returns, for every position
of the context, the server's top-K next-token log-probabilities.

Exact where those suffice, refused elsewhere:
- greedy decoding needs only each position's most likely token;
- sampling with top_k <= K: the k most likely tokens are all among the K returned, and
  temperature and top-p act on their log-probabilities (a softmax over a subset depends only on
  differences, which log-probabilities keep). Anything else would need the whole distribution.

The server speaks text, so the context is sent as text and the token texts it echoes are
checked against ours: a different tokenisation, a token text shared by several ids, or a failing
server raises RemoteError and the job fails closed. Local tokenizer: the same vocabulary as the
served model (the spec's `path`).
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from collections.abc import Sequence
from urllib.parse import urlsplit, urlunsplit

import numpy as np
import requests

from ..params import GenerationParams
from ..tokenizer import Tokenizer
from .base import ModelIdentity, Provider, Scores

RUNTIME = "remote (OpenAI-compatible completions, prompt logprobs)"


class RemoteError(Exception):
    """The server could not give an exact answer; the job must fail closed."""


def params_refusal(*, temperature: float, top_k: int, top_logprobs: int) -> tuple[str, str] | None:
    """(field, reason) when a remote model cannot decode these parameters exactly."""
    if temperature == 0:
        return None
    if top_k == 0:
        return (
            "top_k",
            f"a remote model returns only its top {top_logprobs} log-probabilities per position, "
            f"so sampling must use top_k between 1 and {top_logprobs} (or temperature 0)",
        )
    if top_k > top_logprobs:
        return (
            "top_k",
            f"top_k {top_k} exceeds the {top_logprobs} log-probabilities the remote model "
            f"returns per position",
        )
    return None


def public_url(url: str) -> str:
    """The URL as a record may name it: without user, password, query or fragment, where
    credentials (a key in the query, a password in the authority) would otherwise be written
    into every audit record."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"  # an IPv6 literal
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


class RemoteProvider(Provider):
    def __init__(
        self,
        base_url: str,
        *,
        tokenizer: Tokenizer,
        name: str,
        model: str = "",
        revision: str = "",
        sha256: str = "",
        components: dict[str, str] | None = None,
        top_logprobs: int = 20,
        timeout_s: float = 30.0,
        retries: int = 2,
        session: requests.Session | None = None,
    ) -> None:
        self._url = base_url.rstrip("/") + "/completions"
        self._model = model
        self._tokenizer = tokenizer
        self._top = top_logprobs
        self._timeout = timeout_s
        self._retries = retries
        self._session = session or requests.Session()
        self.tokenizer = tokenizer
        self.vocab_size = tokenizer.vocab_size
        self._ids_by_text = _ids_by_text(tokenizer)
        # The server adds the BOS itself when the model wants one, so it is not sent as text.
        self._adds_bos = tokenizer.encode("a") != tokenizer.encode("a", add_special=False)
        self.identity = ModelIdentity(
            name=name,
            revision=revision,
            sha256=sha256,
            runtime=RUNTIME,
            runtime_version=f"{public_url(base_url)} model={model or 'default'}",
            **(components or {}),  # the tokenizer, config and template of the local copy
        )

    def next_distributions(
        self, context: Sequence[int], num_positions: int, params: GenerationParams
    ) -> np.ndarray:
        return self.next_scores(context, num_positions, params).p

    def next_scores(
        self,
        context: Sequence[int],
        num_positions: int,
        params: GenerationParams,
        allowed: np.ndarray | None = None,
    ) -> Scores:
        """The server's top K log-probabilities per position (renormalised over them, as they
        are all it reports), and the request's distributions made from them."""
        if allowed is not None:
            # Its most probable allowed token may lie outside the top K the server reports.
            raise RemoteError("a grammar's mask is not exact on a remote model's top K tokens")
        refusal = params_refusal(
            temperature=params.temperature, top_k=params.top_k, top_logprobs=self._top
        )
        if refusal is not None:
            raise RemoteError(f"{refusal[0]}: {refusal[1]}")
        if not 1 <= num_positions <= len(context):
            raise ValueError(f"num_positions {num_positions} outside 1..{len(context)}")
        rows, unplaced = self._scored(context, num_positions)
        # The tokens the parameters keep must all be placed: the top 1 (greedy) or top k.
        needed = 1 if params.is_greedy else params.top_k
        _require_placed(rows, unplaced, needed)
        return Scores(rows, params)

    def logits(self, context: Sequence[int], num_positions: int) -> np.ndarray:
        """Log-probabilities of the top K tokens at each asked position, -inf elsewhere; the
        most likely token of each row is always placed (exact for greedy decoding)."""
        rows, unplaced = self._scored(context, num_positions)
        _require_placed(rows, unplaced, 1)
        return rows

    def _scored(self, context: Sequence[int], num_positions: int):
        """(rows, unplaced): the placed log-probabilities, and per row the highest one whose
        token text names several ids (-inf when none), which cannot be placed exactly."""
        context = list(context)
        bos = self._tokenizer.bos_token_id
        starts_with_bos = context[:1] == [bos]
        # A model that wants a BOS gets it from the server, so it is not sent as text.
        sent = context[1:] if self._adds_bos and starts_with_bos else context
        body = {
            "prompt": self._tokenizer.render(sent),
            "max_tokens": 1,
            "temperature": 0,
            "echo": True,
            "logprobs": self._top,
        }
        if self._model:
            body["model"] = self._model
        logprobs = self._post(body)["choices"][0]["logprobs"]
        # The server echoes the tokens after a leading BOS (then its one completion token),
        # skipping every BOS id; entry i carries the distribution after the prefix ending at
        # that token, except the first entry, which it leaves empty.
        echoed = context[1:] if starts_with_bos else context
        kept = [i for i, token in enumerate(echoed) if token != bos]
        self._check_tokenisation([echoed[i] for i in kept], logprobs["tokens"])
        tops = logprobs["top_logprobs"]
        entry_of = {i: j for j, i in enumerate([*kept, len(echoed)][: len(tops)])}
        rows = np.full((num_positions, self.vocab_size), -np.inf, dtype=np.float32)
        unplaced = np.full(num_positions, -np.inf)
        first = len(context) - num_positions + 1  # the shortest prefix asked for
        for t in range(num_positions):
            entry = entry_of.get(first + t - 1)  # the distribution after first + t tokens
            top = tops[entry] if entry is not None else None
            if not top:
                raise RemoteError(
                    f"the server returned no log-probabilities after {first + t} tokens"
                )
            for text, logprob in top.items():
                ids = self._ids_by_text.get(text, [])
                if len(ids) == 1:
                    rows[t, ids[0]] = logprob if math.isfinite(logprob) else -np.inf
                else:
                    unplaced[t] = max(unplaced[t], logprob)
        return rows, unplaced

    def _check_tokenisation(self, context: list[int], echoed: list[str]) -> None:
        ours = [self._text(token) for token in context]
        if echoed[: len(ours)] != ours:
            at = next(
                (i for i, (a, b) in enumerate(zip(ours, echoed, strict=False)) if a != b),
                min(len(ours), len(echoed)),
            )
            raise RemoteError(
                f"the server tokenised the context differently from token {at} on "
                f"({echoed[at : at + 3]!r} against {ours[at : at + 3]!r})"
            )

    def _text(self, token: int) -> str:
        return _server_text(self._tokenizer, token)

    def _post(self, body: dict) -> dict:
        """POST with a timeout and bounded retries on connection errors and 5xx answers."""
        error: Exception | None = None
        for attempt in range(self._retries + 1):
            if attempt:
                time.sleep(0.2 * 2 ** (attempt - 1))
            try:
                response = self._session.post(self._url, json=body, timeout=self._timeout)
            except requests.RequestException as exc:
                error = exc
                continue
            if response.status_code >= 500:
                error = RemoteError(f"HTTP {response.status_code}: {response.text[:200]}")
                continue
            if response.status_code != 200:
                raise RemoteError(f"the server refused: HTTP {response.status_code}: "
                                  f"{response.text[:200]}")  # fmt: skip
            return response.json()
        raise RemoteError(
            f"the model server at {self._url} failed {self._retries + 1} times: {error}"
        )


def _server_text(tokenizer: Tokenizer, token: int) -> str:
    """A token as OpenAI-compatible servers spell it: its bytes, incomplete UTF-8 dropped."""
    to_bytes = getattr(tokenizer, "token_to_piece", None)
    if to_bytes is None:
        return tokenizer.piece(token).replace("\ufffd", "")
    return to_bytes(token).decode("utf-8", errors="ignore")


def _ids_by_text(tokenizer: Tokenizer) -> dict[str, list[int]]:
    index: dict[str, list[int]] = defaultdict(list)
    for token in range(tokenizer.vocab_size):
        index[_server_text(tokenizer, token)].append(token)
    return dict(index)


def _require_placed(rows: np.ndarray, unplaced: np.ndarray, needed: int) -> None:
    """Every row's `needed` most likely tokens must be placed: more likely than any token the
    server named by a text that several ids share (special tokens, partial UTF-8)."""
    kth = np.sort(rows, axis=1)[:, -needed]
    for t in np.flatnonzero(~(kth > unplaced)):
        raise RemoteError(
            f"position {t}: a token the server names only by a text several ids share (a "
            f"special token or part of a character) ranks among the top {needed}, so the "
            f"answer cannot be decided exactly"
        )

"""The audit record of one speculative step, as the canonical payload the audit store hashes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .drafters.base import DraftSource
from .params import GenerationParams, bounds_of
from .providers.base import ModelIdentity
from .rules import Verdict
from .sampling import decimal

# The clear form of formats 3 and 4 (audit.evidence.binding): decisions sit between a trail's
# request and answer records, and the audit store seals them (audit.evidence.sealing: a format-4
# trail seals all but the request's settings, and labels them "v": 4). payload() is the clear
# form, before sealing and after opening; the trail's format_version decides how it is sealed.
PAYLOAD_VERSION = 3


_HOW_DRAWN = {
    "argmax": "was taken as the target's argmax",
    "argmax-bonus": "was taken as the target's argmax",
    "residual": "was drawn from the residual distribution",
    "bonus": "was drawn from the target distribution",
    "coupled": "is the target's own draw at that position",
    "coupled-bonus": "is the target's own draw at that position",
}


def _optional_decimal(x: float | None) -> str | None:
    return None if x is None else decimal(x)


def params_payload(params: GenerationParams) -> dict[str, Any]:
    """The generation parameters as every record writes them (floats as decimal strings)."""
    payload = {}
    for name, bounds in bounds_of().items():
        value = getattr(params, name)
        payload[name] = decimal(value) if bounds.kind is float else value
    return payload


@dataclass(frozen=True, eq=False)
class StepRecord:
    """Everything behind one step's tokens; committed before any of them is released.

    payload() holds only str, int, bool, None, list and dict: probabilities travel as the
    shortest decimal strings that read back as the same binary64, never as floats.

    With a tokenizer the decoder also gives each token's text (Tokenizer.piece), for reviewers;
    the token ids remain the record's truth. Without one the payload has no text keys.
    """

    request_id: str
    step: int
    draft: ModelIdentity
    target: ModelIdentity
    params: GenerationParams
    context_length: int  # tokens (prompt + output) before this step
    verdict: Verdict
    emitted: tuple[int, ...]
    stop: str | None  # None | "eos" | "max_tokens" | "stop" (the caller's stop condition)
    draft_ns: int
    verify_ns: int
    drafted_text: tuple[str, ...] | None = None  # parallel to verdict.tokens
    correction_text: str | None = None
    emitted_text: tuple[str, ...] | None = None  # parallel to emitted
    draft_source: DraftSource | None = None  # where a copying drafter copied the draft from
    # Per emitted token: the target's own log-probability of it (log-softmax of the logits,
    # before temperature, top-k and top-p), what the OpenAI API reports; None: not recorded.
    logprobs: tuple[float, ...] | None = None
    # Per emitted token: the target's most probable (token, logprob) at its position, by the
    # same distribution, when the request asked for top log-probabilities (its top_logprobs).
    target_top: tuple[tuple[tuple[int, float], ...], ...] | None = None

    @property
    def drafted_count(self) -> int:
        return len(self.verdict.tokens)

    @property
    def accepted_count(self) -> int:
        return self.verdict.accepted_count

    def payload(self) -> dict[str, Any]:
        verdict = self.verdict
        payload = {
            "v": PAYLOAD_VERSION,
            "kind": "decision",
            "request_id": self.request_id,
            "step": self.step,
            "rule": verdict.rule,
            "draft": self.draft.as_payload(),
            "target": self.target.as_payload(),
            "params": params_payload(self.params),
            "context_length": self.context_length,
            "draft_length": self.drafted_count,
            "drafted": [self._drafted(i) for i in range(self.drafted_count)],
            "draft_source": None if self.draft_source is None else self.draft_source.payload(),
            "accepted_count": verdict.accepted_count,
            "correction": {
                "token": verdict.correction_token,
                "kind": verdict.correction_kind,
                "u": _optional_decimal(verdict.correction_u),
                "p": decimal(verdict.correction_p),
            },
            "emitted": list(self.emitted),
            "stop": self.stop,
            "rationale": self.rationale(),
            "timings_us": {"draft": self.draft_ns // 1000, "verify": self.verify_ns // 1000},
        }
        if self.correction_text is not None:
            payload["correction"]["text"] = self.correction_text
        if self.emitted_text is not None:
            payload["emitted_text"] = list(self.emitted_text)
        if self.logprobs is not None:
            payload["logprobs"] = [decimal(value) for value in self.logprobs]
        if self.target_top is not None:
            payload["target_top"] = [
                [{"token": token, "logprob": decimal(logprob)} for token, logprob in position]
                for position in self.target_top
            ]
        return payload

    def _drafted(self, i: int) -> dict[str, Any]:
        verdict = self.verdict
        tested = i < verdict.tested
        drafted = {
            "token": int(verdict.tokens[i]),
            "q": decimal(verdict.q[i]),
            "p": decimal(verdict.p[i]),
            "ratio": None if verdict.ratio is None else decimal(verdict.ratio[i]),
            "u": decimal(verdict.u[i]) if verdict.u is not None and tested else None,
            "accepted": i < verdict.accepted_count,
        }
        if self.drafted_text is not None:
            drafted["text"] = self.drafted_text[i]
        return drafted

    def rationale(self) -> str:
        """One plain-English sentence a reviewer can read without the rest of the record."""
        verdict = self.verdict
        k, n = self.drafted_count, verdict.accepted_count
        drawn = _HOW_DRAWN[verdict.correction_kind]
        # No token ids: the sentence travels in clear while the tokens are sealed (format 3).
        if k == 0:
            clauses = [f"Nothing was drafted; the token {drawn}"]
        elif verdict.rejected:
            if verdict.u is None:
                why = "not the target's argmax"
            elif verdict.correction_kind == "coupled":
                why = f"not the target's own draw there, u={verdict.u[n]:.2f}"
            else:
                why = f"u={verdict.u[n]:.2f} >= p/q={verdict.ratio[n]:.2f}"
            clauses = [
                f"Accepted {n} of {k} drafted tokens",
                f"the token at position {n + 1} was rejected ({why}) and its replacement {drawn}",
            ]
        else:
            clauses = [f"Accepted all {k} drafted tokens", f"the bonus token {drawn}"]
        if self.stop == "eos":
            clause = "generation stopped at the end-of-sequence token"
            if len(self.emitted) < n + 1:
                clause += f", so only {len(self.emitted)} of the {n + 1} tokens were emitted"
            clauses.append(clause)
        elif self.stop == "stop":
            clauses.append("generation stopped because the caller's stop condition was met")
        elif self.stop == "max_tokens":
            clauses.append(f"generation stopped at the {self.params.max_tokens}-token limit")
        return "; ".join(clauses) + "."

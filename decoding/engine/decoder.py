"""The speculative decoding loop: draft, verify in one target pass, record, then release.

Invariant 1 of ARCHITECTURE.md lives here: a step's tokens join the output only after the
audit sink has committed the step's record; if it cannot, nothing of the step is released.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from .drafters.base import Drafter
from .params import GenerationParams, GenerationRequest
from .providers.base import Provider
from .records import StepRecord
from .rules import verify_greedy, verify_sampling


class AuditSink(Protocol):
    def record(self, record: StepRecord) -> None:
        """Return only once the record is durably committed; raise if it cannot be."""


class AuditUnavailable(Exception):
    """The audit sink could not commit a step, so the request fails closed."""


@dataclass(frozen=True)
class GenerationResult:
    request_id: str
    output_token_ids: tuple[int, ...]
    steps: int
    drafted: int
    accepted: int
    stop_reason: str  # "eos" | "max_tokens"
    records_written: int

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0

    @property
    def mean_accepted_length(self) -> float:
        return self.accepted / self.steps


def _until_eos(tokens: list[int], eos_token_id: int | None) -> tuple[int, ...]:
    if eos_token_id in tokens:
        return tuple(tokens[: tokens.index(eos_token_id) + 1])
    return tuple(tokens)


def _stop_reason(emitted: tuple[int, ...], produced: int, params: GenerationParams) -> str | None:
    if params.eos_token_id in emitted:
        return "eos"
    if produced >= params.max_tokens:
        return "max_tokens"
    return None


class SpeculativeDecoder:
    def __init__(self, drafter: Drafter, target: Provider, sink: AuditSink) -> None:
        # Refused here, at configuration time, rather than mid-request: token ids of different
        # vocabularies do not name the same tokens, so q and p could not be compared.
        if drafter.vocab_size != target.vocab_size:
            raise ValueError(
                f"draft vocabulary ({drafter.vocab_size} tokens) differs from the target's "
                f"({target.vocab_size} tokens)"
            )
        self._drafter = drafter
        self._target = target
        self._sink = sink

    def generate(
        self,
        request: GenerationRequest,
        *,
        on_step: Callable[[StepRecord], None] | None = None,
    ) -> GenerationResult:
        params = request.params
        vocab = self._target.vocab_size
        if max(request.prompt_token_ids) >= vocab:
            raise ValueError(f"prompt_token_ids must be below the vocabulary size {vocab}")
        if params.eos_token_id is not None and params.eos_token_id >= vocab:
            raise ValueError(f"eos_token_id must be below the vocabulary size {vocab}")

        output: list[int] = []
        drafted = accepted = step = 0
        stop = None
        while stop is None:
            context = [*request.prompt_token_ids, *output]
            # Leave room for the token the target always adds (correction or bonus).
            k = min(params.draft_length, params.max_tokens - len(output) - 1)
            started = time.perf_counter_ns()
            draft = self._drafter.propose(context, k, params, seed=params.seed, step=step)
            drafted_at = time.perf_counter_ns()
            if len(draft.tokens) > k:
                raise ValueError(f"drafter proposed {len(draft.tokens)} tokens, at most {k} asked")
            k = len(draft.tokens)
            p = self._target.next_distributions([*context, *draft.tokens.tolist()], k + 1, params)
            if params.is_greedy:
                verdict = verify_greedy(draft, p)
            else:
                verdict = verify_sampling(draft, p, seed=params.seed, step=step)
            verified_at = time.perf_counter_ns()

            kept = [*draft.tokens[: verdict.accepted_count].tolist(), verdict.correction_token]
            emitted = _until_eos(kept, params.eos_token_id)
            stop = _stop_reason(emitted, len(output) + len(emitted), params)
            record = StepRecord(
                request_id=request.request_id,
                step=step,
                draft=self._drafter.identity,
                target=self._target.identity,
                params=params,
                context_length=len(context),
                verdict=verdict,
                emitted=emitted,
                stop=stop,
                draft_ns=drafted_at - started,
                verify_ns=verified_at - drafted_at,
            )
            self._commit(record)
            output.extend(emitted)
            drafted += k
            accepted += verdict.accepted_count
            step += 1
            if on_step is not None:
                on_step(record)

        return GenerationResult(
            request_id=request.request_id,
            output_token_ids=tuple(output),
            steps=step,
            drafted=drafted,
            accepted=accepted,
            stop_reason=stop,
            records_written=step,
        )

    def _commit(self, record: StepRecord) -> None:
        try:
            self._sink.record(record)
        except AuditUnavailable:
            raise
        except Exception as exc:
            raise AuditUnavailable(
                f"audit sink could not commit step {record.step} of request {record.request_id}"
            ) from exc

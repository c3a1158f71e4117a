"""The speculative decoding loop: draft, verify in one target pass, record, then release.

Invariant 1 (docs/architecture.md) lives here: a step's tokens join the output only after the
audit sink has committed the step's record; if it cannot, nothing of the step is released.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from .drafters.base import Drafter, Reference
from .grammar import Constraint
from .params import GenerationParams, GenerationRequest
from .providers.base import Provider, Scores
from .records import StepRecord
from .rules import Verdict, verify_coupled, verify_greedy, verify_sampling
from .sampling import top_tokens
from .schedule import DraftSchedule, FixedSchedule
from .tokenizer import Tokenizer


class AuditSink(ABC):
    """Where the decoder hands each step's record. A sink may hold records and commit several in
    one transaction; the decoder calls flush() before it returns the result, so no token leaves
    it before its record is committed. A stream's reader takes each step from the committed
    store (the sink decides how soon it commits: decoding.worker.sinks)."""

    @abstractmethod
    def record(self, record: StepRecord) -> None:
        """Take one record; commit it now or hold it until flush(). Raise if it cannot be kept."""

    def flush(self) -> None:  # noqa: B027 - a sink that commits in record() has nothing to do
        """Return only once every record taken so far is durably committed; raise if not."""


class AuditUnavailable(Exception):
    """The audit sink could not commit a step, so the request fails closed."""


# The parts of a step, in the order it takes them (GenerationResult.parts_ns): choosing the
# draft length, drafting, the target's pass (with a sequence engine, waiting for the pass it
# shares), the scores made from its logits, the rule's decision, building the record, and the
# audit sink's record and flush.
STEP_PARTS = ("schedule", "drafter", "model", "scores", "rule", "record", "audit")


@dataclass
class _Tally:
    """What one generation counts as it steps: tokens drafted and accepted, each step's
    (drafted, accepted), and where its time went (STEP_PARTS)."""

    drafted: int = 0
    accepted: int = 0
    step_counts: list[tuple[int, int]] = field(default_factory=list)
    audit_ns: int = 0
    parts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(STEP_PARTS, 0))

    def step(self, drafted: int, accepted: int, **parts_ns: int) -> None:
        self.drafted += drafted
        self.accepted += accepted
        self.step_counts.append((drafted, accepted))
        for part, ns in parts_ns.items():
            self.parts[part] += ns

    def audit(self, ns: int) -> None:
        self.audit_ns += ns
        self.parts["audit"] += ns


@dataclass(frozen=True)
class GenerationResult:
    request_id: str
    output_token_ids: tuple[int, ...]
    steps: int
    drafted: int
    accepted: int
    stop_reason: str  # "eos" | "max_tokens" | "stop" | "cancelled"
    step_counts: tuple[tuple[int, int], ...]  # (drafted, accepted) of each step
    prefill_ns: int  # drafter and target taking in the prompt
    cached_prompt_tokens: int  # leading prompt tokens the target had cached (not evaluated)
    decode_ns: int  # from the first step's start to the last step's commit
    audit_ns: int  # inside sink.record, summed over the steps (part of decode_ns)
    # Per STEP_PARTS part, the nanoseconds the steps spent in it (their sum is about decode_ns).
    parts_ns: tuple[tuple[str, int], ...] = ()

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0

    @property
    def mean_accepted_length(self) -> float:
        return self.accepted / self.steps


def _verdict(draft, scores: Scores, params: GenerationParams, *, coupled, position, step):
    """The rule's decision on the draft: greedy, coupled (one draw per output position) or
    the step-keyed rule of earlier audit formats."""
    if params.is_greedy:
        return verify_greedy(draft, scores)
    if coupled:
        return verify_coupled(draft, scores, seed=params.seed, position=position)
    return verify_sampling(draft, scores, seed=params.seed, step=step)


def _until_eos(tokens: list[int], eos_token_id: int | None) -> tuple[int, ...]:
    if eos_token_id in tokens:
        return tuple(tokens[: tokens.index(eos_token_id) + 1])
    return tuple(tokens)


def _stop_reason(
    output: list[int],
    emitted: tuple[int, ...],
    params: GenerationParams,
    stop: Callable[[Sequence[int]], bool] | None,
) -> str | None:
    if params.eos_token_id in emitted:
        return "eos"
    if stop is not None and stop((*output, *emitted)):
        return "stop"
    if len(output) + len(emitted) >= params.max_tokens:
        return "max_tokens"
    return None


def _target_top(scores: Scores, emitted: int, n: int) -> tuple | None:
    """The target's n most probable tokens at each emitted position, by its own distribution
    (the emitted tokens sit at positions 0.., since a step keeps an accepted prefix and then its
    correction or bonus)."""
    if n == 0:
        return None
    logprobs = scores.logprobs(emitted)
    return tuple(
        tuple((token, float(logprobs[i, token])) for token, _ in top_tokens(np.exp(logprobs[i]), n))
        for i in range(emitted)
    )


class SpeculativeDecoder:
    def __init__(
        self,
        drafter: Drafter,
        target: Provider,
        sink: AuditSink,
        *,
        tokenizer: Tokenizer | None = None,
    ) -> None:
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
        self._tokenizer = tokenizer

    def generate(
        self,
        request: GenerationRequest,
        *,
        schedule: DraftSchedule | None = None,
        stop: Callable[[Sequence[int]], bool] | None = None,
        cancelled: Callable[[], bool] | None = None,
        references: Sequence[Reference] = (),
    ) -> GenerationResult:
        """Decode one request, committing each step's record before releasing its tokens.

        schedule chooses each step's draft length, at most params.draft_length (default: always
        params.draft_length); it holds one request's state. stop is asked, once a step's tokens
        are decided and before its record is written, whether the output so far (those tokens
        included) should end generation; the record then says "stop". The sink may commit the
        records of several steps together; they are all committed before this returns.
        cancelled is asked before each step; once it answers True no further step is taken and
        the result (stop_reason "cancelled") holds the tokens of the steps already recorded.
        references are token sequences a copying drafter may copy from besides the context.
        """
        params = request.params
        self._check_ids(request)
        if schedule is None:
            schedule = FixedSchedule(params.draft_length)
        constraint = self._constraint(request)

        prompt = list(request.prompt_token_ids)
        prefill_started = time.perf_counter_ns()
        self._drafter.prefill(prompt, references)
        cached_prompt_tokens = self._target.prefill(prompt)
        decode_started = time.perf_counter_ns()

        output: list[int] = []
        tally = _Tally()
        stop_reason = None
        while stop_reason is None:
            if cancelled is not None and cancelled():
                stop_reason = "cancelled"
                break
            stop_reason = self._step(request, prompt, output, tally, schedule, constraint, stop)

        flushing = time.perf_counter_ns()
        self._flush(len(tally.step_counts))  # before the result releases the output
        committed = time.perf_counter_ns()
        tally.audit(committed - flushing)
        return GenerationResult(
            request_id=request.request_id,
            output_token_ids=tuple(output),
            steps=len(tally.step_counts),
            drafted=tally.drafted,
            accepted=tally.accepted,
            stop_reason=stop_reason,
            step_counts=tuple(tally.step_counts),
            prefill_ns=decode_started - prefill_started,
            cached_prompt_tokens=cached_prompt_tokens,
            decode_ns=committed - decode_started,
            audit_ns=tally.audit_ns,
            parts_ns=tuple(tally.parts.items()),
        )

    def _check_ids(self, request: GenerationRequest) -> None:
        vocab = self._target.vocab_size
        if max(request.prompt_token_ids) >= vocab:
            raise ValueError(f"prompt_token_ids must be below the vocabulary size {vocab}")
        eos = request.params.eos_token_id
        if eos is not None and eos >= vocab:
            raise ValueError(f"eos_token_id must be below the vocabulary size {vocab}")

    def _step(
        self,
        request: GenerationRequest,
        prompt: list[int],
        output: list[int],
        tally: _Tally,
        schedule: DraftSchedule,
        constraint: Constraint | None,
        stop: Callable[[Sequence[int]], bool] | None,
    ) -> str | None:
        """One step: draft, score, decide, commit the record, then add the emitted tokens to
        `output` (and to the grammar's state). Returns the stop reason it recorded (None: go
        on)."""
        params = request.params
        step = len(tally.step_counts)
        scheduling = time.perf_counter_ns()
        context = [*prompt, *output]
        wanted = schedule.next_length(params.draft_length)
        if not 0 <= wanted <= params.draft_length:
            raise ValueError(
                f"the draft schedule asked for {wanted} tokens, outside 0..{params.draft_length}"
            )
        # Leave room for the token the target always adds (correction or bonus).
        k = min(wanted, params.max_tokens - len(output) - 1)
        started = time.perf_counter_ns()
        coupled = request.coupled and not params.is_greedy
        position = len(output) if coupled else None
        draft = self._drafter.propose(
            context, k, params, seed=params.seed, step=step, position=position
        )
        if len(draft.tokens) > k:
            raise ValueError(f"drafter proposed {len(draft.tokens)} tokens, at most {k} asked")
        draft = draft.prefix(schedule.keep(draft))
        if constraint is not None:  # a token the grammar refuses could never be accepted
            draft = draft.prefix(constraint.allowed_prefix(draft.tokens.tolist()))
        drafted_at = time.perf_counter_ns()
        proposed = draft.tokens.tolist()
        k = len(proposed)
        allowed = None if constraint is None else constraint.masks(proposed)
        scores = self._target.next_scores([*context, *proposed], k + 1, params, allowed=allowed)
        scored_at = time.perf_counter_ns()
        verdict = _verdict(draft, scores, params, coupled=coupled, position=position, step=step)
        verified_at = time.perf_counter_ns()

        kept = [*proposed[: verdict.accepted_count], verdict.correction_token]
        emitted = _until_eos(kept, params.eos_token_id)
        stop_reason = _stop_reason(output, emitted, params, stop)
        record = StepRecord(
            request_id=request.request_id,
            step=step,
            draft=self._drafter.identity,
            target=self._target.identity,
            params=params,
            context_length=len(context),
            verdict=verdict,
            emitted=emitted,
            stop=stop_reason,
            draft_ns=drafted_at - started,
            verify_ns=verified_at - drafted_at,
            draft_source=draft.source,
            logprobs=scores.emitted_logprobs(emitted),
            target_top=_target_top(scores, len(emitted), request.top_logprobs),
            **self._texts(proposed, verdict, emitted),
        )
        committing = time.perf_counter_ns()
        self._commit(record)
        committed = time.perf_counter_ns()
        tally.step(
            k,
            verdict.accepted_count,
            schedule=started - scheduling,
            drafter=drafted_at - started,
            model=scored_at - drafted_at - scores.made_ns,
            scores=scores.made_ns,
            rule=verified_at - scored_at,
            record=committing - verified_at,
        )
        tally.audit(committed - committing)
        output.extend(emitted)
        if constraint is not None:
            constraint.advance(emitted)
        schedule.observe(k, verdict.accepted_count)  # after the grammar took the tokens
        return stop_reason

    def _constraint(self, request: GenerationRequest) -> Constraint | None:
        """The request's grammar, over the target's vocabulary (None: unconstrained)."""
        if request.response_format is None:
            return None
        if self._tokenizer is None:
            raise ValueError("a response_format needs the target's tokenizer to compile")
        if not (request.params.is_greedy or request.coupled):
            # Cutting a draft before a refused token is exact when every emitted token is the
            # target's own choice or draw (greedy, coupled); under the step-keyed rule that
            # token's certain rejection must draw from the residual, not from p.
            raise ValueError("a response_format is sampled with coupled draws (audit format 5)")
        return Constraint(request.response_format, self._tokenizer.grammar_tokenizer())

    def _texts(self, draft: list[int], verdict: Verdict, emitted: tuple[int, ...]) -> dict:
        """Each token's text for the record, when there is a tokenizer to spell it."""
        if self._tokenizer is None:
            return {}
        piece = self._tokenizer.piece
        drafted_text = tuple(piece(token) for token in draft)
        correction_text = piece(verdict.correction_token)
        # emitted is the accepted prefix, then the correction, cut after end-of-sequence.
        kept_text = (*drafted_text[: verdict.accepted_count], correction_text)
        return {
            "drafted_text": drafted_text,
            "correction_text": correction_text,
            "emitted_text": kept_text[: len(emitted)],
        }

    def _commit(self, record: StepRecord) -> None:
        """Hand the record to the sink (which commits it now or at a later flush)."""
        try:
            self._sink.record(record)
        except AuditUnavailable:
            raise
        except Exception as exc:
            raise AuditUnavailable(
                f"audit sink could not commit step {record.step} of request {record.request_id}"
            ) from exc

    def _flush(self, steps: int) -> None:
        try:
            self._sink.flush()
        except AuditUnavailable:
            raise
        except Exception as exc:
            raise AuditUnavailable(
                f"audit sink could not commit the records of steps up to {steps - 1}"
            ) from exc

"""The decision rule, re-checked from the records alone (docs/audit-format.md, "The decision rule,
re-checkable from the record").

A signature proves who wrote a record, not that the record obeys the rule. This module is what a
verifier holds against a dishonest or buggy service that signs what it likes: for every format-2
decision it recomputes what the record's own numbers force — each accept draw `u` from the RNG
formula, each `ratio` as p / q, the accept test, where the step stopped testing, the correction's
kind and draw, the emitted tokens, the stop and the token budget, the draft's provenance — and
that the decision ran under its request's models and params. What needs the model's logits (that
p is the target's probability, that an argmax is the argmax) cannot be re-checked without the
model: replay does that.

Pure: no Django, no model code. The RNG and number formatting are written again here from the
doc, on purpose: a verifier that imported the engine's own functions would share its bugs.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field

from audit.evidence.sealing import workings_sealed

GREEDY, SAMPLING, COUPLED = "greedy-argmax", "speculative-sampling", "coupled-sampling"
# The first trail format whose sampled decisions use coupled draws, one per output position.
COUPLED_SINCE = 5
DECISION_SCOPE = "decision"  # the scope of a failure of this rule (audit.evidence.chain.Failure)
DECISION_PARAMS = {
    "max_tokens",
    "temperature",
    "top_k",
    "top_p",
    "seed",
    "draft_length",
    "eos_token_id",
}
PROMPT_LOOKUP_RUNTIME = "pathfinder"  # a copying drafter: q is one-hot, the draft has a source
CONTEXT = "context"


def uniform(seed: int, step: int, position: int, stream: str) -> float:
    """The doc's draw: (first 8 bytes of SHA-256(M), big-endian, >> 11) / 2^53."""
    message = f"PF-RNG-v1\x00{seed}\x00{step}\x00{position}\x00{stream}".encode()
    return (int.from_bytes(hashlib.sha256(message).digest()[:8], "big") >> 11) / 2**53


def output_uniform(seed: int, index: int) -> float:
    """The doc's draw for output position `index` (coupled sampling, format 5)."""
    message = f"PF-RNG-v2\x00{seed}\x00{index}\x00sample".encode()
    return (int.from_bytes(hashlib.sha256(message).digest()[:8], "big") >> 11) / 2**53


def number_text(x: float) -> str:
    """How a record writes a binary64: Python's repr ("1.0", "1e-05", "0.1")."""
    return repr(float(x))


class _Bad(ValueError):
    """A field that is not what the format says; the message names it."""


def _number(value: object, name: str, *, low: float = 0.0, high: float = math.inf) -> float:
    if not isinstance(value, str):
        raise _Bad(f"{name} is not a decimal string")
    try:
        x = float(value)
    except ValueError:
        raise _Bad(f"{name} {value!r} is not a number") from None
    if not math.isfinite(x) or number_text(x) != value:
        raise _Bad(f"{name} {value!r} is not written as the format writes numbers")
    if not low <= x <= high:
        raise _Bad(f"{name} {value!r} is outside [{low}, {high}]")
    return x


def _finite(value: object) -> float | None:
    try:
        x = float(value) if isinstance(value, str) else math.nan
    except ValueError:
        return None
    return x if math.isfinite(x) else None


def _token(value: object, name: str) -> int | None:
    """A token id, or None: sealed in a format-3 record and not opened (audit.evidence.sealing)."""
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise _Bad(f"{name} is not a token id")
    return value


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_top(top: object) -> bool:
    """A target_top entry: [{token, logprob}, ...], each logprob written as the format writes
    numbers and at most 0."""
    if not isinstance(top, list):
        return False
    for entry in top:
        if not isinstance(entry, dict) or set(entry) != {"token", "logprob"}:
            return False
        x = _finite(entry["logprob"])
        if not (_whole(entry["token"]) and entry["token"] >= 0):
            return False
        if x is None or number_text(x) != entry["logprob"] or x > 0:
            return False
    return True


def _copies(decision: dict) -> bool:
    """Whether the step's drafter is prompt lookup, which copies its draft from a source."""
    draft = decision["draft"]
    return isinstance(draft, dict) and draft.get("runtime") == PROMPT_LOOKUP_RUNTIME


def _until_eos(tokens: list[int], eos: int | None) -> list[int]:
    return tokens[: tokens.index(eos) + 1] if eos is not None and eos in tokens else tokens


@dataclass
class DecisionRule:
    """Walks one format-2 trail's decisions in step order; `check` returns what each breaks.

    `request` is the trail's request record (None when it is missing or broken: the checks that
    need it are then skipped, and the trail fails for the missing request elsewhere)."""

    request: dict | None
    # The prompt's token ids when the bundle discloses them: copied drafts are then re-read
    # from the context. None: they cannot be, and `unchecked` says so.
    prompt_ids: list[int] | None = None
    ended: str | None = None  # the stop of an earlier decision, once one ended the generation
    # What the decisions so far emitted; None where a sealed decision's tokens are unknown.
    emitted: list[int | None] = field(default_factory=list)
    unchecked: set[str] = field(default_factory=set)  # what could not be re-checked, and why
    # Format 4 states no prompt length: without the prompt's ids, the first opened decision's
    # context_length stands for it.
    _assumed_prompt: int | None = None
    _after_sealed: bool = False  # a sealed decision came last: how many it emitted is unknown

    @property
    def prompt_count(self) -> int | None:
        """The prompt's length in tokens: as a format 2-3 request states it, or as the
        disclosed token ids count it (None: not known yet)."""
        prompt = (self.request or {}).get("prompt")
        count = prompt.get("token_count") if isinstance(prompt, dict) else None
        if isinstance(count, int) and not isinstance(count, bool):
            return count
        if self.prompt_ids is not None:
            return len(self.prompt_ids)
        return self._assumed_prompt

    @property
    def context(self) -> int | None:
        """The next decision's context_length: the prompt's tokens and those emitted so far
        (None without a readable request)."""
        count = self.prompt_count
        return None if count is None or self.request is None else count + len(self.emitted)

    def check(self, decision: dict) -> list[str]:
        failures: list[str] = []
        try:
            self._check(decision, failures)
        except _Bad as bad:
            failures.append(str(bad))
        except (TypeError, KeyError, AttributeError, IndexError) as broken:
            failures.append(f"the decision is not in the format's shape ({broken!r})")
        return failures

    def _check(self, d: dict, fail: list[str]) -> None:
        if self.ended is not None:
            fail.append(f"a decision follows one that ended the generation ({self.ended!r})")
        params, rule = self._check_settings(d, fail)
        if workings_sealed(d):
            self.unchecked.add(
                "decisions whose workings are sealed: their drafts, numbers and tokens derive "
                "from a withheld text (docs/adr/0026)"
            )
            self._after_sealed, self.ended = True, d["stop"]
            return
        self._follow_context(d["context_length"], fail)
        if self.context is not None and d["context_length"] != self.context:
            fail.append(
                f"context_length {d['context_length']!r}: the prompt and the tokens emitted "
                f"before make {self.context}"
            )
        self._check_workings(d, params, rule, fail)

    def _follow_context(self, context_length: object, fail: list[str]) -> None:
        """Where the count of tokens before this decision is not known from the records before
        it (format 4: no prompt length stated, or a sealed decision just before), take it from
        this decision's context_length, and say what that leaves unchecked."""
        if not isinstance(context_length, int) or isinstance(context_length, bool):
            raise _Bad("context_length is not an integer")
        if self.request is not None and self.prompt_count is None:
            self._assumed_prompt = context_length - len(self.emitted)
            self.unchecked.add(
                "the first decision's context_length against the prompt's length (the "
                "prompt's token ids are not disclosed)"
            )
        if self._after_sealed and self.context is not None:
            unknown = context_length - self.context
            if unknown < 0:
                fail.append(
                    f"context_length {context_length}: the prompt and the tokens emitted before "
                    f"make at least {self.context}"
                )
            self.emitted.extend([None] * max(unknown, 0))
        self._after_sealed = False

    def _check_settings(self, d: dict, fail: list[str]) -> tuple[dict, str]:
        """The decision ran under its request's params and models, by the rule its temperature
        names: what a format-4 decision shows in clear. Returns (params, rule)."""
        params = d["params"]
        if not isinstance(params, dict) or set(params) != DECISION_PARAMS:
            raise _Bad(f"params must hold exactly {sorted(DECISION_PARAMS)}")
        if self.request is not None:
            asked = self.request.get("params") or {}
            differing = sorted(n for n in DECISION_PARAMS if asked.get(n) != params[n])
            if differing:
                fail.append(f"params {differing} differ from the request's")
            models = self.request.get("models") or {}
            for role in ("draft", "target"):
                if d.get(role) != models.get(role):
                    fail.append(f"the {role} model differs from the request's")
        temperature = _number(params["temperature"], "params.temperature")
        coupled = isinstance(d.get("v"), int) and d["v"] >= COUPLED_SINCE
        rule = GREEDY if temperature == 0 else COUPLED if coupled else SAMPLING
        if d["rule"] != rule:
            fail.append(
                f"rule {d['rule']!r}: temperature {params['temperature']} in format {d.get('v')} "
                f"means {rule!r}"
            )
        return params, rule

    def _check_workings(self, d: dict, params: dict, rule: str, fail: list[str]) -> None:
        """Everything the decision's own numbers force (its workings, in format 4)."""
        seed, step = params["seed"], d["step"]
        # Coupled draws are keyed by output position: the tokens emitted before this decision.
        at = (step, len(self.emitted)) if rule == COUPLED else (step, None)
        max_tokens, eos = params["max_tokens"], params["eos_token_id"]
        drafted, n = d["drafted"], d["accepted_count"]
        k = len(drafted)
        if d["draft_length"] != k:
            fail.append(f"draft_length {d['draft_length']!r}, but {k} tokens are drafted")
        budget = max_tokens - len(self.emitted) - 1  # room for the token the target always adds
        if k > max(budget, 0) or k > params["draft_length"]:
            fail.append(f"{k} drafted tokens: at most min(draft_length, {budget}) may be")
        if not isinstance(n, int) or isinstance(n, bool) or not 0 <= n <= k:
            raise _Bad(f"accepted_count {n!r} is not between 0 and {k}")
        rejected = n < k
        tokens = [_token(t["token"], f"drafted[{i}].token") for i, t in enumerate(drafted)]
        for i, t in enumerate(drafted):
            self._check_drafted(d, i, t, n, rule, seed, at, fail)
        self._check_correction(d, tokens, n, rule, seed, at, fail)
        correction = _token(d["correction"]["token"], "correction.token")
        emitted = self._check_emitted(d, [*tokens[:n], correction], eos, fail)
        self._check_stop(d["stop"], emitted, eos, max_tokens, fail)
        self._check_source(d, tokens, fail)
        self._check_logprobs(d, emitted, fail)
        self._check_shown(d, emitted, fail)
        if rejected and rule in (GREEDY, COUPLED):
            what = "argmax" if rule == GREEDY else "target's own draw"
            if None in (correction, tokens[n]):
                self.unchecked.add(
                    f"that a rejected {'argmax ' if rule == GREEDY else ''}draft differs from "
                    f"the {what} that replaced it (a token of it is withheld)"
                )
            elif correction == tokens[n]:
                fail.append(f"drafted[{n}] was rejected, yet the {what} replacing it is the same")
        self.emitted.extend(emitted)
        self.ended = d["stop"]

    def _check_emitted(self, d: dict, kept: list, eos: int | None, fail: list[str]) -> list:
        """The emitted tokens are the accepted prefix and the correction (`kept`), cut after
        end-of-sequence; returns what the rule emits, to judge the rest by. A sealed token
        (format 3, None) leaves only the count to check where it would decide the cut."""
        emitted = d["emitted"]
        if None not in kept:
            expected = _until_eos(kept, eos)
            if emitted != expected:
                fail.append(
                    f"emitted {emitted!r}: the accepted prefix and the correction, cut after "
                    f"end-of-sequence, are {expected!r}"
                )
            return expected
        count, shown = len(emitted), kept[: len(emitted)]
        if not 1 <= count <= len(kept):
            fail.append(f"emitted_count {count}: the step keeps 1 to {len(kept)} tokens")
        elif None not in shown:
            ends = count == len(kept) or (eos is not None and shown[-1] == eos)
            if _until_eos(shown, eos) != shown or not ends:
                fail.append(
                    f"emitted {shown!r}: of the accepted prefix and the correction, only an "
                    "end-of-sequence token cuts the rest, and none is emitted after it"
                )
        else:
            if count < len(kept) and d["stop"] != "eos":
                fail.append(
                    f"emitted_count {count} of {len(kept)}: only end-of-sequence cuts them short"
                )
            self.unchecked.add(
                "which emitted tokens are end-of-sequence (the answer's tokens are withheld)"
            )
        return shown

    def _check_drafted(self, d, i, t, n, rule, seed, at, fail) -> None:
        name = f"drafted[{i}]"
        tested = i <= n  # positions after the first rejection are not tested
        if t["accepted"] is not (i < n):
            fail.append(f"{name}.accepted {t['accepted']!r}: accepted_count {n} makes it {i < n}")
        p = _number(t["p"], f"{name}.p", high=1.0)
        q = _number(t["q"], f"{name}.q", high=1.0)
        if _copies(d) and t["q"] != "1.0":
            fail.append(f'{name}.q {t["q"]}: a copied draft\'s q is one-hot, "1.0"')
        if rule == GREEDY:
            if t["ratio"] is not None or t["u"] is not None:
                fail.append(f"{name}: greedy decisions carry no ratio and no draw")
            return
        if q == 0:
            raise _Bad(f"{name}.q is 0: a drafter proposed a token it gives no probability")
        ratio = _number(t["ratio"], f"{name}.ratio")
        if ratio != p / q:
            fail.append(f"{name}.ratio {t['ratio']} is not p / q = {number_text(p / q)}")
        if not tested:
            if t["u"] is not None:
                fail.append(f"{name}.u: a position after the first rejection is not tested")
            return
        step, position = at
        if rule == COUPLED:  # kept iff it is the target's own draw there: that needs the model
            u = output_uniform(seed, position + i)
            if t["u"] != number_text(u):
                fail.append(f"{name}.u {t['u']!r} is not the RNG's draw {number_text(u)} for "
                            f"output position {position + i}")  # fmt: skip
            return
        u = uniform(seed, step, i, "accept")
        if t["u"] != number_text(u):
            fail.append(f"{name}.u {t['u']!r} is not the RNG's accept draw {number_text(u)}")
        if (u < min(1.0, ratio)) is not (i < n):
            verdict = "accepts" if u < min(1.0, ratio) else "rejects"
            fail.append(f"{name}: u {number_text(u)} against min(1, {t['ratio']}) {verdict} it")

    @staticmethod
    def _check_correction(d, tokens, n, rule, seed, at, fail) -> None:
        c, k = d["correction"], len(tokens)
        _number(c["p"], "correction.p", high=1.0)
        step, position = at
        if rule == GREEDY:
            kind = "argmax" if n < k else "argmax-bonus"
            if c["u"] is not None:
                fail.append("correction.u: an argmax is not drawn")
        elif rule == COUPLED:
            kind = "coupled" if n < k else "coupled-bonus"
            u = number_text(output_uniform(seed, position + n))
            if c["u"] != u:
                fail.append(f"correction.u {c['u']!r} is not the RNG's draw {u} for output "
                            f"position {position + n}")  # fmt: skip
        else:
            kind = "residual" if n < k else "bonus"
            u = number_text(uniform(seed, step, n, kind))
            if c["u"] != u:
                fail.append(f"correction.u {c['u']!r} is not the RNG's {kind} draw {u}")
        if c["kind"] != kind:
            fail.append(f"correction.kind {c['kind']!r}: {n} of {k} accepted makes it {kind!r}")
        if rule == GREEDY and n < k and float(c["p"]) < float(d["drafted"][n]["p"]):
            fail.append("correction.p is below the rejected token's: it is not the argmax")

    def _check_stop(self, stop, emitted, eos, max_tokens, fail) -> None:
        total = len(self.emitted) + len(emitted)
        if total > max_tokens:
            fail.append(f"{total} tokens emitted, more than max_tokens {max_tokens}")
        if None in emitted:  # sealed: _check_emitted judged the count, and named the rest
            expected: tuple = ("eos",) if stop == "eos" else ()
            expected += ("max_tokens", "stop") if total >= max_tokens else (None, "stop")
        elif eos is not None and eos in emitted:
            expected = ("eos",)
        elif total >= max_tokens:
            expected = ("max_tokens", "stop")
        else:
            expected = (None, "stop")
        if stop not in expected:
            fail.append(f"stop {stop!r}, where the tokens make it one of {list(expected)}")
        asked = (self.request or {}).get("params")
        if stop == "stop" and isinstance(asked, dict) and not asked.get("stop"):
            fail.append("stop 'stop', but the request has no stop strings")

    @staticmethod
    def _check_logprobs(d, emitted, fail) -> None:
        """The target's own log-probability of each emitted token: one per token, each a number
        as the format writes them, at most 0. (Its value needs the model: a replay checks it.)"""
        if "logprobs" not in d:  # records written before the field existed
            return
        values = d["logprobs"]
        if not isinstance(values, list) or len(values) != len(emitted):
            fail.append(f"logprobs must hold one entry per emitted token ({len(emitted)})")
            return
        for i, value in enumerate(values):
            x = _finite(value)
            if x is None or number_text(x) != value:
                shown = json.dumps(value)
                fail.append(f"logprobs[{i}] {shown} is not written as the format writes numbers")
            elif x > 0:
                fail.append(f"logprobs[{i}] {value} is above 0")

    @staticmethod
    def _check_shown(d, emitted, fail) -> None:
        """What a record shows beside its tokens, where it has it: one text per emitted token
        (None only for a sealed token), the target's top alternatives per emitted token (None:
        a sealed slot), each a list of {token, logprob} with log-probabilities at most 0, and
        the step's timings as non-negative whole microseconds."""
        n = len(emitted)
        if "emitted_text" in d:
            texts = d["emitted_text"]
            if (
                not isinstance(texts, list)
                or len(texts) != n
                or not all(
                    isinstance(text, str) or (text is None and token is None)
                    for text, token in zip(texts, emitted, strict=False)
                )
            ):
                fail.append(f"emitted_text must hold one text per emitted token ({n})")
        if "target_top" in d:
            tops = d["target_top"]
            if not isinstance(tops, list) or len(tops) != n:
                fail.append(f"target_top must hold one entry per emitted token ({n})")
            else:
                for j, top in enumerate(tops):
                    if top is not None and not _is_top(top):
                        fail.append(
                            f"target_top[{j}] is not a list of {{token, logprob}} with "
                            "log-probabilities at most 0"
                        )
        if "timings_us" in d:
            timings = d["timings_us"]
            if not (
                isinstance(timings, dict)
                and set(timings) == {"draft", "verify"}
                and all(_whole(x) and x >= 0 for x in timings.values())
            ):
                fail.append("timings_us must be {draft, verify}, each a non-negative whole number")

    def _check_source(self, d, tokens, fail) -> None:
        if "draft_source" not in d:  # records written before the field existed
            return
        source, k = d["draft_source"], len(tokens)
        if not _copies(d) or k == 0:
            if source is not None:
                fail.append("draft_source is set, but nothing was copied")
            return
        if not isinstance(source, dict) or set(source) != {"reference", "offset", "match_length"}:
            fail.append("a copied draft names no draft_source of reference, offset, match_length")
            return
        offset, length = source["offset"], source["match_length"]
        if not all(isinstance(x, int) and not isinstance(x, bool) for x in (offset, length)):
            fail.append("draft_source offset and match_length must be integers")
        elif not 1 <= length <= offset:
            fail.append(f"draft_source: a match of {length} cannot end before offset {offset}")
        elif source["reference"] != CONTEXT:
            self.unchecked.add(
                "drafts copied from another job (its tokens are that job's, not in this trail)"
            )
        elif self.context is not None and offset + k > self.context:
            fail.append(
                f"draft_source: {k} tokens at offset {offset} run past the context "
                f"({self.context} tokens)"
            )
        elif self.prompt_ids is None:
            self.unchecked.add(
                "drafts copied from the context (the prompt's token ids are withheld)"
            )
        else:
            self._check_copy(tokens, offset, length, fail)

    def _check_copy(self, tokens: list[int], offset: int, length: int, fail: list[str]) -> None:
        """The drafted tokens are the context's at `offset`, after `length` tokens that equal the
        context's last `length`: what prompt lookup copied, read back."""
        context = [*self.prompt_ids, *self.emitted]
        if (
            None in tokens
            or None in context[offset - length : offset + len(tokens)]
            or (None in context[-length:])
        ):
            self.unchecked.add("drafts copied from the context (tokens they copy are withheld)")
        elif context[offset : offset + len(tokens)] != tokens:
            fail.append(f"draft_source: the context's tokens at offset {offset} are not the draft")
        elif length > len(context) or context[offset - length : offset] != context[-length:]:
            fail.append(
                f"draft_source: the {length} tokens before offset {offset} do not match the "
                "context's last tokens"
            )

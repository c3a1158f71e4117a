"""What the walk page shows of one decision record, with each decision re-checked here from the
record's own decimal strings rather than trusting its `accepted` flags.

speculative-sampling: drafted token i is accepted iff u_i < min(1, p_i / q_i); since u < 1 this is
u_i < p_i / q_i, shown as "u = 0.31 < p/q = 0.84 → accepted" (or "≥ … → rejected").
greedy-argmax: a drafted token is accepted iff it is the target's argmax. The record names the
argmax where it matters: at the first rejected position it is the correction token (kind
"argmax"); before it, an accepted token is the argmax. Shown as "argmax p = 12 → rejected".
coupled-sampling (audit format 5): a drafted token is accepted iff it is the target's own draw at
its output position, shown as "target's draw 12 → rejected" like greedy's argmax.
Tokens after the first rejection were never tested ("not reached").

Numbers are shown with the fewest significant digits (at least two) that still show u, p/q and 1
in the order they really compare; the record's exact strings are shown beside them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from decimal import Decimal

from audit.evidence.binding import BONUS, CORRECTION, DRAFT, TARGET, emitted_from
from audit.evidence.decision_rule import COUPLED, GREEDY

CORRECTION_HOW = {
    "residual": "drawn from the residual distribution norm(max(0, p − q)) at the first "
    "rejected position",
    "bonus": "every drafted token was accepted: a bonus token drawn from the target's "
    "distribution p",
    "argmax": "the target's argmax at the first rejected position",
    "argmax-bonus": "every drafted token was accepted: the bonus token is the target's argmax",
    "coupled": "the target's own draw at the first rejected position (its u, the position's draw)",
    "coupled-bonus": "every drafted token was accepted: the bonus token is the target's own draw "
    "at the next position",
}
# A step that drafted nothing: its one token is the target's own, as plain decoding's.
PLAIN_HOW = {
    "bonus": "drawn from the target's distribution p, as plain decoding draws it",
    "argmax-bonus": "the target's argmax, as plain greedy decoding picks it",
    "coupled-bonus": "the target's own draw at this position, as plain decoding draws it",
}


def _significant(value: float, digits: int) -> str:
    """`value` to `digits` significant digits, never in exponent notation (0.000012)."""
    if not math.isfinite(value):
        return str(value)
    return format(Decimal(f"{value:.{digits}g}"), "f")


def _same_order(x: float, y: float, shown_x: float, shown_y: float) -> bool:
    return (shown_x < shown_y) == (x < y) and (shown_x == shown_y) == (x == y)


def shown_pair(a: float, b: float) -> tuple[str, str]:
    """a and b with the fewest significant digits (at least 2) that keep a, b and 1 in the
    order they really compare (so a p/q of 0.9957 is never shown as 1)."""
    for digits in range(2, 18):
        sa, sb = _significant(a, digits), _significant(b, digits)
        fa, fb = float(sa), float(sb)
        if (
            _same_order(a, b, fa, fb)
            and _same_order(a, 1.0, fa, 1.0)
            and _same_order(b, 1.0, fb, 1.0)
        ):
            return sa, sb
    return repr(a), repr(b)


def decision_check(*, u: str | None, p: str, q: str) -> tuple[str, bool | None]:
    """The speculative-sampling accept test recomputed from the record's strings."""
    if u is None:
        return "u is missing from the record: the decision cannot be re-checked", None
    u_value, p_value, q_value = float(u), float(p), float(q)
    ratio = p_value / q_value if q_value > 0 else math.inf
    accepted = u_value < ratio
    shown_u, shown_ratio = shown_pair(u_value, ratio)
    relation = "<" if accepted else "≥"
    verdict = "accepted" if accepted else "rejected"
    return f"u = {shown_u} {relation} p/q = {shown_ratio} → {verdict}", accepted


def greedy_check(*, argmax: int, token: int, what: str = "argmax p") -> tuple[str, bool]:
    accepted = argmax == token
    return f"{what} = {argmax} → {'accepted' if accepted else 'rejected'}", accepted


def token_label(token: int, text: str | None, eos: int | None = None) -> str:
    """A token's text piece; the end-of-text token by name (its piece is empty); else its id in
    angle brackets (a model without a tokenizer)."""
    if text:
        return text
    return "⟨end of text⟩" if token is not None and token == eos else f"⟨{token}⟩"


def _eos(payload: dict) -> int | None:
    """The record's end-of-text token (its params name it)."""
    return (payload.get("params") or {}).get("eos_token_id")


def _percent(value: str | None) -> str:
    if value is None:
        return "0"
    return f"{min(100.0, max(0.0, float(value) * 100)):.1f}"


def _identity(model: dict | None) -> dict:
    model = model or {}
    sha = model.get("sha256") or ""
    return {
        "name": model.get("name"),
        "revision": model.get("revision"),
        "file_type": model.get("file_type") or "",  # absent in records before it was kept
        "sha256": sha,
        "sha256_short": sha[:12],
        "runtime": model.get("runtime"),
        "runtime_version": model.get("runtime_version"),
    }


@dataclass
class DraftedToken:
    position: int  # 1-based, as the rationale counts
    token: int
    label: str
    q: str
    p: str
    ratio: str | None
    u: str | None
    accepted: bool  # as recorded
    reached: bool
    check: str
    check_agrees: bool | None  # the recomputed verdict equals the recorded flag
    q_pct: str = "0"
    p_pct: str = "0"

    @property
    def has_text(self) -> bool:
        return self.label != token_label(self.token, None)


@dataclass
class Step:
    step: int
    rule: str
    greedy: bool
    drafted: list[DraftedToken]
    accepted_count: int
    correction: dict | None
    emitted: list[dict]
    stop: str | None
    rationale: str
    draft: dict
    target: dict
    params: dict
    context_length: int | None
    draft_length: int | None
    timings_us: dict = field(default_factory=dict)

    @property
    def checks_agree(self) -> bool:
        return all(token.check_agrees is not False for token in self.drafted)


def step_present(payload: dict) -> Step:
    """One record's payload as the walk page shows it."""
    rule = payload.get("rule", "")
    greedy = rule == GREEDY
    # Greedy and coupled keep a drafted token iff it is the target's own pick there (its argmax,
    # its draw); at the first rejection the correction names that pick.
    picked = {GREEDY: "argmax p", COUPLED: "target's draw"}.get(rule)
    drafted_raw = payload.get("drafted") or []
    correction = payload.get("correction")
    first_rejected = next(
        (i for i, item in enumerate(drafted_raw) if not item.get("accepted")), len(drafted_raw)
    )
    drafted = []
    for i, item in enumerate(drafted_raw):
        reached = i <= first_rejected
        if not reached:
            check, computed = "not reached: an earlier token was rejected", None
        elif picked is not None:
            argmax = item["token"]
            if i == first_rejected and correction is not None:
                argmax = correction.get("token")
            check, computed = greedy_check(argmax=argmax, token=item["token"], what=picked)
        else:
            check, computed = decision_check(u=item.get("u"), p=item["p"], q=item["q"])
        drafted.append(
            DraftedToken(
                position=i + 1,
                token=item["token"],
                label=token_label(item["token"], item.get("text"), _eos(payload)),
                q=item.get("q"),
                p=item.get("p"),
                ratio=item.get("ratio"),
                u=item.get("u"),
                accepted=bool(item.get("accepted")),
                reached=reached,
                check=check,
                check_agrees=None if computed is None else computed == bool(item.get("accepted")),
                q_pct=_percent(item.get("q")),
                p_pct=_percent(item.get("p")),
            )
        )
    shown_correction = None
    if correction is not None:
        kind = correction.get("kind", "")
        shown_correction = {
            **correction,
            "label": token_label(correction.get("token"), correction.get("text"), _eos(payload)),
            "how": (PLAIN_HOW if not drafted else CORRECTION_HOW).get(kind, f"kind {kind!r}"),
            # A reviewer's word for it (the record's kind is in the page's title); a step that
            # drafted nothing has neither: its token is the target's own.
            "is_bonus": kind.endswith("bonus"),
            "kind_words": ""
            if not drafted
            else ("bonus" if kind.endswith("bonus") else "correction"),
            "p_pct": _percent(correction.get("p")),
        }
    return Step(
        step=payload.get("step", 0),
        rule=rule,
        greedy=greedy,
        drafted=drafted,
        accepted_count=payload.get("accepted_count", 0),
        correction=shown_correction,
        emitted=emitted_tokens(payload),
        stop=payload.get("stop"),
        rationale=payload.get("rationale", ""),
        draft=_identity(payload.get("draft")),
        target=_identity(payload.get("target")),
        params=payload.get("params") or {},
        context_length=payload.get("context_length"),
        draft_length=payload.get("draft_length"),
        timings_us=payload.get("timings_us") or {},
    )


SOURCE_LABEL = {
    DRAFT: "accepted draft token",
    CORRECTION: "target's correction",
    BONUS: "bonus token",
    TARGET: "plain target step",
}


def emitted_tokens(payload: dict) -> list[dict]:
    """The tokens a step released, each with its text piece (or id), the step, how it was
    produced and its probabilities under the target (p) and the draft (q, drafted tokens only).
    """
    step = payload.get("step", 0)
    return [
        {
            "token": emitted.token,
            "label": token_label(emitted.token, emitted.text, _eos(payload)),
            "step": step,
            "source": emitted.source,
            "source_label": SOURCE_LABEL[emitted.source],
            "p": emitted.p,
            "q": emitted.q,
        }
        for emitted in emitted_from(payload)
    ]

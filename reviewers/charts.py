"""The walk page's two small charts, drawn on the server as SVG from the decision records
themselves (never from the job's summary counters): how many drafted tokens each step kept, and
how often a draft token was accepted at each position once the position was reached.

Each chart is a list of bars in a fixed viewBox, plus the numbers as a table for screen readers
and for anyone who would rather read than look.
"""

from __future__ import annotations

from dataclasses import dataclass

from audit.evidence.binding import DECISION, kind_of

WIDTH, HEIGHT = 600, 120  # the viewBox; the page scales it


@dataclass(frozen=True)
class Bar:
    x: float
    width: float
    y: float
    height: float
    title: str


@dataclass(frozen=True)
class Chart:
    bars: list[Bar]  # the value drawn
    backdrop: list[Bar]  # what it is out of (drafted tokens per step), drawn lighter
    rows: list[tuple]  # the table: one tuple per bar
    y_max: float  # the largest value drawn (the scale's top is at least 1)
    width: int = WIDTH
    height: int = HEIGHT


def _decisions(payloads: list[dict]) -> list[dict]:
    return [payload for payload in payloads if kind_of(payload) == DECISION]


def _bar(index: int, count: int, value: float, y_max: float, title: str) -> Bar:
    slot = WIDTH / max(count, 1)
    height = HEIGHT * value / max(y_max, 1)
    return Bar(
        x=round(index * slot + slot * 0.1, 2),
        width=round(slot * 0.8, 2),
        y=round(HEIGHT - height, 2),
        height=round(height, 2),
        title=title,
    )


def accepted_per_step(payloads: list[dict]) -> Chart | None:
    """Per step: tokens drafted (backdrop) and kept (bar)."""
    steps = _decisions(payloads)
    if not steps:
        return None
    drafted = [len(step.get("drafted") or []) for step in steps]
    accepted = [step.get("accepted_count", 0) for step in steps]
    y_max = max(drafted)
    n = len(steps)
    rows = [(step.get("step", i), accepted[i], drafted[i]) for i, step in enumerate(steps)]
    return Chart(
        bars=[
            _bar(i, n, accepted[i], y_max, f"step {row[0]}: {accepted[i]} of {drafted[i]} kept")
            for i, row in enumerate(rows)
        ],
        backdrop=[_bar(i, n, drafted[i], y_max, "") for i in range(n)],
        rows=rows,
        y_max=y_max,
    )


def acceptance_by_position(payloads: list[dict]) -> Chart | None:
    """Per draft position (1 = the first drafted token): the share of steps that reached the
    position (every earlier token accepted) in which its token was accepted too."""
    reached: list[int] = []
    kept: list[int] = []
    for step in _decisions(payloads):
        drafted = step.get("drafted") or []
        accepted = step.get("accepted_count", 0)
        for position in range(min(accepted + 1, len(drafted))):
            if position == len(reached):
                reached.append(0)
                kept.append(0)
            reached[position] += 1
            kept[position] += position < accepted
    if not reached:
        return None
    n = len(reached)
    rows = [(i + 1, kept[i], reached[i], kept[i] / reached[i]) for i in range(n)]
    return Chart(
        bars=[
            _bar(i, n, rate, 1.0, f"position {pos}: {k} of {r} accepted ({rate:.0%})")
            for i, (pos, k, r, rate) in enumerate(rows)
        ],
        backdrop=[_bar(i, n, 1.0, 1.0, "") for i in range(n)],
        rows=rows,
        y_max=1.0,
    )

"""A custody event in a reviewer's words: one sentence for each action, from the detail the event
recorded (reviewers.custody). The sentence is for reading; the recorded detail, which the chain
hashes, stays beside it on the page for anyone who must quote it exactly."""

from __future__ import annotations

import json

from reviewers.models import CustodyEvent

Action = CustodyEvent.Action


def sentence(event: CustodyEvent) -> str:
    """What happened, as a sentence that names who did it and what it touched."""
    try:
        detail = json.loads(event.detail) if event.detail else {}
    except ValueError:
        detail = {}
    if not isinstance(detail, dict):
        detail = {}
    who = event.user.get_username()
    if detail.get("run_by"):  # a command names the account and where it ran; the admin, "admin"
        who = f"{who} (through {detail['run_by']})"
    words = _WORDS.get(event.action)
    what = words(detail) if words is not None else f"did {event.action}"
    return f"{who} {what}."


def _count(n: int, thing: str) -> str:
    return f"{n} {thing}{'' if n == 1 else 's'}"


def _how_many(value) -> int:
    """A detail's count, recorded as a number or as the list of what it counts."""
    if isinstance(value, int):
        return value
    return len(value) if isinstance(value, (list, tuple, dict)) else 0


def _quoted(text) -> str:
    return f"“{text}”"


def _viewed(d: dict) -> str:
    step = d.get("step")
    return "viewed the trail" if step is None else f"viewed step {step} of the trail"


def _verified(d: dict) -> str:
    against = ""
    if d.get("checkpoint_size") is not None:
        against = f" against the checkpoint over {_count(d['checkpoint_size'], 'sealed trail')}"
    checked = _count(d.get("records") or 0, "record")
    if d.get("ok"):
        return f"verified the trail: intact, {checked} checked{against}"
    failures = _count(d.get("failures") or 0, "failure")
    first = f"; first: {d['first_failure']}" if d.get("first_failure") else ""
    return f"verified the trail: BROKEN, {failures} in {checked}{against}{first}"


def _file(d: dict) -> str:
    sha = d.get("sha256")
    digest = f", SHA-256 {sha[:16]}…" if sha else ""
    return f"{d.get('filename', 'a file')} ({_count(d.get('bytes') or 0, 'byte')}{digest})"


def _exported(d: dict) -> str:
    what = "receipt" if str(d.get("filename", "")).endswith(".cose") else "bundle"
    return f"downloaded the trail's {what} {_file(d)}"


def _produced(d: dict) -> str:
    if d.get("batch"):
        scope = f"batch {d['batch']} of matter {_quoted(d.get('matter'))}"
    else:
        span = " ".join(
            part
            for part in (
                f"from {d['since']}" if d.get("since") else "",
                f"until {d['until']}" if d.get("until") else "",
            )
            if part
        )
        scope = f"matter {_quoted(d.get('matter'))}" + (f" {span}" if span else "")
    listed = _count(_how_many(d.get("trails")), "trail")
    left_out = _how_many(d.get("left_out"))
    return (
        f"produced {scope}: {listed}, {left_out} left out, in {_file(d)}"
        if left_out
        else f"produced {scope}: {listed}, in {_file(d)}"
    )


def _annotated(d: dict) -> str:
    return f"annotated step {d.get('step')}: {_quoted(d.get('text', ''))}"


def _signed_off(d: dict) -> str:
    return f"signed off the trail on verification {d.get('verification')}"


def _held(d: dict) -> str:
    return f"placed a legal hold on matter {_quoted(d.get('matter'))}: {_quoted(d.get('reason'))}"


def _released(d: dict) -> str:
    return (
        f"released the legal hold on matter {_quoted(d.get('matter'))}, placed "
        f"{str(d.get('held_since', ''))[:10]} for {_quoted(d.get('reason'))}"
    )


def _retention(d: dict) -> str:
    def days(value) -> str:
        return "none" if value is None else _count(value, "day")

    return (
        f"set matter {_quoted(d.get('matter'))}'s retention from {days(d.get('from'))} "
        f"to {days(d.get('to'))}"
    )


def _destroyed(d: dict) -> str:
    parts = [_count(_how_many(d.get("jobs")), "job"), _count(_how_many(d.get("trails")), "trail")]
    if d.get("files"):
        parts.append(_count(_how_many(d["files"]), "file"))
    return (
        f"destroyed the texts of matter {_quoted(d.get('matter'))} under the order "
        f"{_quoted(d.get('order'))}: {', '.join(parts)}; the proofs were kept"
    )


_WORDS = {
    Action.VIEW: _viewed,
    Action.VERIFY: _verified,
    Action.REPLAY: lambda d: "asked for a replay of the trail",
    Action.EXPORT: _exported,
    Action.EXPORT_MATTER: _produced,
    Action.ANNOTATE: _annotated,
    Action.SIGN_OFF: _signed_off,
    Action.LEGAL_HOLD: _held,
    Action.RELEASE_HOLD: _released,
    Action.RETENTION: _retention,
    Action.DESTROY: _destroyed,
}

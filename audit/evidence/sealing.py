"""Audit format 3: a decision's tokens as salted commitments, opened one slot at a time.

A format-2 decision record carries its drafted, correction and emitted tokens (and their text)
in clear, so a bundle that withheld the prompt still showed the prompt's n-grams that prompt
lookup drafted, and other jobs' text it copied (issue 22). A format-3 record carries, for each
token-bearing slot, only

    commitment = SHA-256("PF-TOKEN-v3" || 0x00 || salt || 0x00 || canonical JSON of the value)

where the slot's salt is HMAC-SHA256(trail salt, slot name), as for the bound texts
(audit.evidence.binding). The slots of step s:

    step.<s>.drafted.<i>   {"token": id} or {"token": id, "text": piece}   drafted token i
    step.<s>.correction    the same form                                  the correction/bonus
    step.<s>.top.<j>       [{"token": id, "logprob": "..."}, ...]          target_top at emitted j

and the record says how many tokens it emitted (`emitted_count`): they are the first
`accepted_count` drafted tokens, then the correction, cut to that count. Every number the decision
rule tests (p, q, ratio, u, accepted) stays in clear, so an examiner re-checks every accept and
reject from a bundle that opens none of the slots. The service keeps each record's slot values
beside it (the record row's openings); a bundle discloses a slot's salt and value only where the
texts it discloses allow (audit.export).

Audit format 4 (docs/adr/0026): every number of a decision derives from its context, so the
p of a sealed token read it back against the public model, and the clear numbers confirmed a
guessed prompt. A format-4 decision keeps in clear only what the request and the answer show
anyway (CLEAR_KEYS); everything else, its tokens included, is the value of one slot

    step.<s>.workings   the clear decision's other keys, exactly as format 3's clear form

which a bundle opens only when it withholds nothing (and never for a draft copied from another
job). A sealed decision's workings are not re-checked; an opened one is re-checked as before.

Pure: no Django. docs/audit-format.md specifies every byte.
"""

from __future__ import annotations

import hashlib
import hmac
import re

from audit.evidence.chain import NonCanonicalValue, canonical_json

TOKEN_TAG = b"PF-TOKEN-v3"
SEALED_SINCE = 3  # the first trail format whose decisions carry commitments
WORKINGS_SINCE = 4  # the first whose decisions seal everything computed from the context
_HEX64 = re.compile(r"[0-9a-f]{64}", re.ASCII)
_SLOT = re.compile(
    r"step\.(0|[1-9][0-9]*)\."
    r"(drafted\.(0|[1-9][0-9]*)|correction|top\.(0|[1-9][0-9]*)|workings)"
)
# What a format-4 decision shows in clear: the request's settings and models, and whether the
# step ended the generation (the answer's stop reason). Its "workings" commitment seals the rest.
CLEAR_KEYS = ("v", "kind", "request_id", "step", "rule", "draft", "target", "params", "stop")
WORKINGS = "workings"
# The keys of a workings value: every format-4 decision's, and those only some record.
_WORKINGS_KEYS = {
    "context_length",
    "draft_length",
    "drafted",
    "draft_source",
    "accepted_count",
    "correction",
    "emitted",
    "rationale",
    "timings_us",
}
_WORKINGS_OPTIONAL = {"emitted_text", "logprobs", "target_top"}
# Keys of a clear decision that format 3 replaces by commitments and emitted_count.
_CLEAR_ONLY = ("emitted", "emitted_text", "target_top")


def slot_name(step: int, slot: str) -> str:
    return f"step.{step}.{slot}"


def is_slot_name(name: object) -> bool:
    return isinstance(name, str) and _SLOT.fullmatch(name) is not None


def slot_salt(trail_salt: str, name: str) -> str:
    """HMAC-SHA256(trail salt, slot name), hex: disclosed with that slot's value and no other."""
    return hmac.digest(bytes.fromhex(trail_salt), name.encode("ascii"), "sha256").hex()


def commitment(salt: str, value: object) -> str:
    """SHA-256("PF-TOKEN-v3" || 0x00 || salt bytes || 0x00 || canonical JSON of value), hex."""
    text = canonical_json(value).encode("utf-8")
    return hashlib.sha256(TOKEN_TAG + b"\x00" + bytes.fromhex(salt) + b"\x00" + text).hexdigest()


def _token_value(entry: dict) -> dict:
    value = {"token": entry["token"]}
    if "text" in entry:
        value["text"] = entry["text"]
    return value


def seal_decision(
    clear: dict, trail_salt: str, format_version: int = SEALED_SINCE
) -> tuple[dict, dict[str, object]]:
    """A clear decision payload (decoding.engine.records.StepRecord.payload) as a format-3 or
    format-4 trail stores it: (the payload that is hashed, its slots' values by slot name).
    open_decision undoes it."""
    if format_version >= WORKINGS_SINCE:
        return _seal_workings(clear, trail_salt, format_version)
    step = clear["step"]
    values: dict[str, object] = {}

    def commit(slot: str, value: object) -> str:
        name = slot_name(step, slot)
        values[name] = value
        return commitment(slot_salt(trail_salt, name), value)

    sealed = {key: value for key, value in clear.items() if key not in _CLEAR_ONLY}
    sealed["drafted"] = []
    for i, entry in enumerate(clear["drafted"]):
        kept = {k: v for k, v in entry.items() if k not in ("token", "text")}
        kept["commitment"] = commit(f"drafted.{i}", _token_value(entry))
        sealed["drafted"].append(kept)
    correction = clear["correction"]
    sealed["correction"] = {k: v for k, v in correction.items() if k not in ("token", "text")}
    sealed["correction"]["commitment"] = commit("correction", _token_value(correction))
    sealed["emitted_count"] = len(clear["emitted"])
    if "target_top" in clear:
        sealed["target_top"] = [
            commit(f"top.{j}", top) for j, top in enumerate(clear["target_top"])
        ]
    return sealed, values


def _seal_workings(clear: dict, trail_salt: str, format_version: int) -> tuple[dict, dict]:
    name = slot_name(clear["step"], WORKINGS)
    workings = {key: value for key, value in clear.items() if key not in CLEAR_KEYS}
    sealed = {key: clear[key] for key in CLEAR_KEYS if key in clear}
    sealed["v"] = format_version
    sealed[WORKINGS] = commitment(slot_salt(trail_salt, name), workings)
    return sealed, {name: workings}


def workings_sealed(decision: dict) -> bool:
    """Whether a (possibly opened) decision is format 4's with its workings still sealed: only
    its CLEAR_KEYS are known."""
    return _seals_workings(decision) and WORKINGS in decision


def _seals_workings(decision: dict) -> bool:
    version = decision.get("v")
    return isinstance(version, int) and version >= WORKINGS_SINCE


def emitted_slots(sealed: dict) -> list[str]:
    """The slots whose tokens a format-3 decision emitted, in order (the answer's tokens); a
    format-4 decision has none: its tokens open only with its workings."""
    if _seals_workings(sealed):
        return []
    step, count = sealed.get("step"), sealed.get("emitted_count")
    accepted, drafted = sealed.get("accepted_count"), sealed.get("drafted")
    if not all(isinstance(x, int) and not isinstance(x, bool) for x in (step, count, accepted)):
        return []
    if not isinstance(drafted, list):
        return []
    kept = [f"drafted.{i}" for i in range(min(accepted, len(drafted)))] + ["correction"]
    return [slot_name(step, slot) for slot in kept[: max(count, 0)]]


def slot_commitments(sealed: dict) -> dict[str, object]:
    """Every slot a format-3 or 4 decision commits to, by slot name: its commitment as
    recorded."""
    step = sealed.get("step")
    if _seals_workings(sealed):
        return {slot_name(step, WORKINGS): sealed.get(WORKINGS)}
    found: dict[str, object] = {}
    for i, entry in enumerate(sealed.get("drafted") or []):
        found[slot_name(step, f"drafted.{i}")] = (entry or {}).get("commitment")
    found[slot_name(step, "correction")] = (sealed.get("correction") or {}).get("commitment")
    for j, value in enumerate(sealed.get("target_top") or []):
        found[slot_name(step, f"top.{j}")] = value
    return found


def value_problem(name: str, value: object) -> str | None:
    """Why a slot's opened value is not of its slot's form, or None. (A workings value's
    fields are the decision rule's to judge, as a format-3 clear decision's are.)"""
    if name.endswith("." + WORKINGS):
        keys = set(value) if isinstance(value, dict) else set()
        ok = _WORKINGS_KEYS <= keys <= _WORKINGS_KEYS | _WORKINGS_OPTIONAL
        return None if ok else f"a workings slot opens to an object of {sorted(_WORKINGS_KEYS)}"
    if ".top." in name:
        ok = isinstance(value, list) and all(
            isinstance(x, dict)
            and set(x) == {"token", "logprob"}
            and _is_token(x["token"])
            and isinstance(x["logprob"], str)
            for x in value
        )
        return None if ok else "a top slot opens to a list of {token, logprob}"
    ok = (
        isinstance(value, dict)
        and set(value) in ({"token"}, {"token", "text"})
        and _is_token(value["token"])
        and isinstance(value.get("text", ""), str)
    )
    return None if ok else "a token slot opens to {token} or {token, text}"


def _is_token(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def shape_problem(sealed: dict) -> str | None:
    """Why a format-3 or 4 decision payload cannot be opened at all, or None."""
    if _seals_workings(sealed):
        step = sealed.get("step")
        if not isinstance(step, int) or isinstance(step, bool) or step < 0:
            return "step is not a non-negative integer"
        shown = sorted(set(sealed) - {*CLEAR_KEYS, WORKINGS})
        if shown:
            return f"it carries its workings in clear ({', '.join(shown)})"
        return None if WORKINGS in sealed else "it has no workings commitment"
    for name in ("step", "accepted_count", "emitted_count"):
        value = sealed.get(name)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            return f"{name} is not a non-negative integer"
    drafted, correction = sealed.get("drafted"), sealed.get("correction")
    if not isinstance(drafted, list) or not all(isinstance(e, dict) for e in drafted):
        return "drafted is not a list of objects"
    if not isinstance(correction, dict):
        return "correction is not an object"
    if any(key in sealed for key in _CLEAR_ONLY[:2]):
        return "it carries emitted tokens in clear"
    if any("token" in e or "text" in e for e in [*drafted, correction]):
        return "it carries a token in clear"
    if "target_top" in sealed and not isinstance(sealed["target_top"], list):
        return "target_top is not a list of commitments"
    kept = min(sealed["accepted_count"], len(drafted)) + 1
    if sealed["emitted_count"] > kept:
        return f"emitted_count is more than the {kept} tokens the step keeps"
    if len(sealed.get("target_top", [None] * sealed["emitted_count"])) != sealed["emitted_count"]:
        return "target_top does not hold one commitment per emitted token"
    return None


def opening_failures(sealed: dict, openings: dict[str, dict]) -> list[tuple[str, str]]:
    """What is wrong with one decision's openings (`openings`: slot name -> {"salt", "value"},
    only those opened), as (slot name, reason): each must be of its slot's form and open exactly
    the commitment the record holds, and every commitment must be a digest."""
    failures = []
    commitments = slot_commitments(sealed)
    for name, committed in commitments.items():
        if not (isinstance(committed, str) and _HEX64.fullmatch(committed)):
            failures.append((name, "the record's commitment is not a SHA-256 hex digest"))
    for name in sorted(openings):
        opening = openings[name]
        if name not in commitments:
            failures.append((name, "opened, but the record commits to no such slot"))
            continue
        value = opening.get("value") if isinstance(opening, dict) else None
        problem = value_problem(name, value)
        if problem is not None:
            failures.append((name, problem))
            continue
        try:
            opened = commitment(opening["salt"], value)
        except (ValueError, NonCanonicalValue, KeyError, TypeError):
            failures.append((name, "the opening's salt is not hex or its value not canonical"))
            continue
        if not hmac.compare_digest(opened, str(commitments[name])):
            failures.append((name, "the opened value is not the one the record commits to"))
    return failures


def open_decision(sealed: dict, values: dict[str, object]) -> dict:
    """The clear decision: the format-3 payload with its opened slots' values in place (`values`:
    slot name -> value, of the slots known). A sealed token reads None, so the decision rule
    knows what it cannot re-check; with every slot opened this is exactly the clear payload
    seal_decision was given. A format-4 decision opens whole, or stays as it is
    (workings_sealed)."""
    step = sealed["step"]
    if _seals_workings(sealed):
        workings = values.get(slot_name(step, WORKINGS))
        if not isinstance(workings, dict):
            return dict(sealed)
        return {**{k: v for k, v in sealed.items() if k != WORKINGS}, **workings}
    clear = {k: v for k, v in sealed.items() if k not in ("emitted_count", "target_top")}

    def token_of(slot: str, entry: dict) -> dict:
        kept = {k: v for k, v in entry.items() if k != "commitment"}
        value = values.get(slot_name(step, slot))
        kept["token"] = value["token"] if isinstance(value, dict) else None
        if isinstance(value, dict) and "text" in value:
            kept["text"] = value["text"]
        return kept

    clear["drafted"] = [token_of(f"drafted.{i}", e) for i, e in enumerate(sealed["drafted"])]
    clear["correction"] = token_of("correction", sealed["correction"])
    kept = [*clear["drafted"][: sealed["accepted_count"]], clear["correction"]]
    emitted = kept[: sealed["emitted_count"]]
    clear["emitted"] = [entry["token"] for entry in emitted]
    if any("text" in entry for entry in emitted):
        clear["emitted_text"] = [entry.get("text") for entry in emitted]
    if "target_top" in sealed:
        clear["target_top"] = [
            values.get(slot_name(step, f"top.{j}")) for j in range(len(sealed["target_top"]))
        ]
    return clear

"""Decision records that a test writes straight into a trail, as the engine would write them:
they obey the decision rule (audit.evidence.decision_rule), so a verifier passes them on their
merits."""

from __future__ import annotations

from audit.evidence.decision_rule import (
    COUPLED_SINCE,
    DECISION_PARAMS,
    number_text,
    output_uniform,
    uniform,
)


def plain_step(request: dict, step: int, token: int, *, prompt_tokens: int) -> dict:
    """Step `step` of a trail whose every step drafted nothing and emitted `token`, the
    target's own choice: its argmax at temperature 0, else its bonus draw, after a prompt of
    `prompt_tokens` tokens (format 4's request record does not state it)."""
    params = {name: request["params"][name] for name in DECISION_PARAMS}
    greedy = float(params["temperature"]) == 0
    # Format 5 samples with coupled draws: one per output position, here the step's.
    coupled = request.get("v", 0) >= COUPLED_SINCE
    if greedy:
        rule, kind, u = "greedy-argmax", "argmax-bonus", None
    elif coupled:
        rule, kind = "coupled-sampling", "coupled-bonus"
        u = number_text(output_uniform(params["seed"], step))
    else:
        rule, kind = "speculative-sampling", "bonus"
        u = number_text(uniform(params["seed"], step, 0, "bonus"))
    return {
        "v": 3,
        "kind": "decision",
        "request_id": request["job"],
        "step": step,
        "rule": rule,
        "draft": request["models"]["draft"],
        "target": request["models"]["target"],
        "params": params,
        "context_length": prompt_tokens + step,
        "draft_length": 0,
        "drafted": [],
        "draft_source": None,
        "accepted_count": 0,
        "correction": {
            "token": token,
            "kind": kind,
            "u": u,
            "p": "0.5",
        },  # fmt: skip
        "emitted": [token],
        "stop": None,
        "rationale": "Nothing was drafted; the token was the target's.",
        "timings_us": {"draft": 0, "verify": 0},
    }

"""What a bundle says of one trail: the texts it discloses and the facts its records state,
as the descriptive members (audit.evidence.descriptive) and the report (audit.evidence.report) show
them.

Pure Python (no Django), like the verifier.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from audit.evidence import binding, sealing


@dataclass(frozen=True)
class Texts:
    """The bound texts a bundle discloses: `disclosures` is disclosures.json's object (per bound
    field, its salt and, for fields without a member of their own, its value; or withheld), and
    prompt and answer are prompt.txt and answer.txt ("" when withheld)."""

    disclosures: dict
    prompt: str = ""
    answer: str = ""


NO_TEXTS = Texts({})  # a v1 trail binds none


@dataclass(frozen=True)
class TrailFacts:
    """What the report says of one trail, read from its records and disclosed texts."""

    trail_id: str
    job_id: str
    attempt: int
    outcome: str
    abandoned: bool
    leaf_index: int
    record_count: int
    head_hash: str
    models: dict
    params: dict
    question: str | None  # None: withheld or not bound
    answer: str | None
    steps: int
    drafted: int
    accepted: int
    tokens: dict  # how many emitted tokens were accepted drafts, corrections, bonus tokens and
    # plain target steps (nothing drafted)
    rules: list[str]
    stop: str | None
    # Format 4: steps whose workings the bundle keeps sealed; drafted, accepted and tokens
    # count only the others.
    sealed_steps: int = 0
    # The request record's direction (binding.direction), None where it records none.
    direction: dict | None = None
    # Bundle format 6: destruction.json's statement when the texts were destroyed, and whether
    # the trail carries a receipt.
    destruction: dict | None = None
    receipt: bool = False

    def direction_said(self) -> str:
        """Who directed the job and under what designation, in its request record's words (the
        README's and the report's sentence)."""
        if not isinstance(self.direction, dict):
            return "Who directed it: its request record does not say."
        said = {
            name: json.dumps(value, ensure_ascii=False) if isinstance(value, str) else "not given"
            for name in ("key", "key_owner", "directed_by", "designation")
            for value in [self.direction.get(name)]
        }
        return (
            f"Who directed it, as its request record states: API key {said['key']}, the key's "
            f"owner {said['key_owner']}, directed by {said['directed_by']}, confidentiality "
            f"designation {said['designation']}."
        )

    @classmethod
    def of(
        cls,
        listed: dict,
        payloads: list[dict],
        texts: Texts,
        head_hash: str,
        *,
        destruction: dict | None = None,
        receipt: bool = False,
    ) -> TrailFacts:
        opened = {
            name: entry["value"]
            for name, entry in texts.disclosures.items()
            if sealing.is_slot_name(name) and isinstance(entry, dict) and "value" in entry
        }
        decisions = [
            _structure(p, opened) for p in payloads if binding.kind_of(p) == binding.DECISION
        ]
        request = next((p for p in payloads if binding.kind_of(p) == binding.REQUEST), None)
        first = decisions[0] if decisions else {}
        models = (request or {}).get("models") or {
            "draft": first.get("draft"),
            "target": first.get("target"),
        }
        tokens = {"draft": 0, "correction": 0, "bonus": 0, "target": 0}
        for decision in decisions:
            for emitted in binding.emitted_from(decision):
                tokens[emitted.source] += 1
        disclosed = texts.disclosures
        question = texts.prompt if "salt" in disclosed.get(binding.RENDERED, {}) else None
        if question == "" and "value" in disclosed.get(binding.TOKEN_IDS, {}):
            question = "token ids: " + " ".join(map(str, disclosed[binding.TOKEN_IDS]["value"]))
        answer = texts.answer if "salt" in disclosed.get(binding.ANSWER_TEXT, {}) else None
        answered = next((p for p in payloads if binding.kind_of(p) == binding.ANSWER), None)
        if answer == "" and answered is not None:  # a model without a tokenizer: ids only
            ids = answered.get("output_token_ids") or (  # v3: bound, disclosed with the answer
                disclosed.get(binding.ANSWER_TOKEN_IDS, {}).get("value") or []
            )
            answer = "token ids: " + " ".join(map(str, ids))
        return cls(
            trail_id=listed["trail_id"],
            job_id=listed["job_id"],
            attempt=listed["attempt"],
            outcome=listed["outcome"],
            abandoned=listed["abandoned"],
            leaf_index=listed["leaf_index"],
            record_count=len(payloads),
            head_hash=head_hash,
            models=models,
            params=(request or first).get("params") or {},
            question=question,
            answer=answer,
            steps=len(decisions),
            drafted=sum(len(d.get("drafted") or []) for d in decisions),
            accepted=sum(d.get("accepted_count", 0) for d in decisions),
            tokens=tokens,
            rules=sorted({d.get("rule", "") for d in decisions}),
            stop=decisions[-1].get("stop") if decisions else None,
            sealed_steps=sum(sealing.workings_sealed(d) for d in decisions),
            direction=(request or {}).get("direction"),
            destruction=destruction,
            receipt=receipt,
        )


def _structure(decision: dict, opened: dict) -> dict:
    """A decision as the report counts it: a format-3 one read with every slot sealed (which
    tokens were emitted, and how, follows from its counts, not from the tokens); a format-4 one
    with its workings as the bundle opens them (`opened`: slot name -> value), or sealed."""
    if decision.get("v", 0) < sealing.SEALED_SINCE or sealing.shape_problem(decision) is not None:
        return decision
    if sealing.workings_sealed(decision):
        return sealing.open_decision(decision, opened)
    return sealing.open_decision(decision, {})

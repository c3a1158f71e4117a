"""Audit format v2: a trail binds the question and the answer, not only the decisions.

Pure Python (no Django), like audit.evidence.chain, so the offline verifier and the database
verifier
share it. docs/audit-format.md specifies every byte.

A v2 trail's records, in seq order:

    seq 0          kind "request": the request exactly as the model saw it
    seq 1..n       kind "decision": step s is seq s + 1 (steps count from 0: the RNG's key)
    seq n + 1      kind "answer": the answer exactly as served (only when one was served)

Texts are bound by salted digest, so a privileged or erased text can be withheld later without
breaking the chain: each bound field has its own salt, HMAC-SHA256(trail salt, field name), and
its digest is SHA-256("PF-TEXT-v2" || 0x00 || field salt || 0x00 || UTF-8 text). The trail salt
is kept beside the trail (never in a record); a bundle discloses the salt of each field it
discloses, and only those.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import secrets
from dataclasses import dataclass, field

from audit.evidence import sealing
from audit.evidence.chain import Failure, canonical_json
from audit.evidence.decision_rule import DECISION_SCOPE, DecisionRule
from audit.evidence.matter_leaves import UTC_TIME

# The format of trails opened now. v1 (decisions only) and v2 (tokens in clear) still verify;
# v3 records each decision's tokens as salted commitments, v4 all of a decision's workings and
# no longer states the prompt's length (audit.evidence.sealing, docs/adr/0026); v5 is v4 whose
# sampled decisions take one draw per output position (coupled sampling, docs/adr/0032).
FORMAT_VERSION = 5
FORMAT_VERSIONS = (1, 2, 3, 4, 5)
REQUEST, DECISION, ANSWER = "request", "decision", "answer"
TEXT_TAG = b"PF-TEXT-v2"

# The bound texts, by field name. Each value is hashed as the UTF-8 of its text form:
#   prompt.given      canonical JSON of what the caller sent (a string, a messages list, ids)
#   prompt.rendered   the prompt text that was tokenised ("" when the caller sent token ids)
#   prompt.token_ids  canonical JSON of the prompt's token ids
#   answer.text       the output text exactly as served
#   answer.token_ids  canonical JSON of the output's token ids (v3; v2 answers carry them clear)
GIVEN, RENDERED, TOKEN_IDS, ANSWER_TEXT, ANSWER_TOKEN_IDS = (
    "prompt.given",
    "prompt.rendered",
    "prompt.token_ids",
    "answer.text",
    "answer.token_ids",
)
GIVEN_KINDS = ("prompt", "messages", "prompt_token_ids")
# A structured-output job's grammar (request record's "grammar"), bound like the texts above:
#   grammar.schema    canonical JSON of the response_format's schema ({"type": "object"} for
#                     json_object)
#   grammar.compiled  the grammar the library compiled it to (what every mask is made from)
GRAMMAR_SCHEMA, GRAMMAR_COMPILED = "grammar.schema", "grammar.compiled"
# Stop reasons an answer can carry: the last decision's, or "cancelled" (a step boundary).
STOP_REASONS = ("eos", "max_tokens", "stop", "cancelled")
# Trail outcomes whose job served an answer, so the trail must end with an answer record.
SERVED_OUTCOMES = ("succeeded", "cancelled")
OUTCOMES = (*SERVED_OUTCOMES, "failed", "abandoned")  # every outcome a ledger leaf may seal
_HEX64 = re.compile(r"[0-9a-f]{64}", re.ASCII)


def new_trail_salt() -> str:
    """32 random bytes, hex: the secret from which every bound field's salt derives."""
    return secrets.token_hex(32)


def field_salt(trail_salt: str, name: str) -> str:
    """The salt of one bound field (hex), disclosed with that field's text and no other."""
    return hmac.digest(bytes.fromhex(trail_salt), name.encode("ascii"), "sha256").hex()


def text_digest(salt: str, text: str) -> str:
    """SHA-256("PF-TEXT-v2" || 0x00 || salt bytes || 0x00 || UTF-8 text), hex."""
    return hashlib.sha256(
        TEXT_TAG + b"\x00" + bytes.fromhex(salt) + b"\x00" + text.encode("utf-8")
    ).hexdigest()


def bound_digest(trail_salt: str, name: str, text: str) -> str:
    return text_digest(field_salt(trail_salt, name), text)


@dataclass(frozen=True)
class Question:
    """The request as the model saw it. `params` is the canonical dict of every generation
    parameter (the same form the decision records use, plus the stop strings)."""

    given_kind: str  # one of GIVEN_KINDS
    given: object  # str, list of messages, or list of token ids
    rendered: str
    token_ids: tuple[int, ...]
    params: dict

    def texts(self) -> dict[str, str]:
        return {
            GIVEN: canonical_json(self.given),
            RENDERED: self.rendered,
            TOKEN_IDS: canonical_json(list(self.token_ids)),
        }


@dataclass(frozen=True)
class Answer:
    """The answer as served: token ids, text and stop reason."""

    token_ids: tuple[int, ...]
    text: str
    stop_reason: str


def request_payload(
    *,
    trail_salt: str,
    job_id: str,
    matter: str,
    request_id: str | None,
    attempt: int,
    previous_trail: str | None,
    model_spec: str,
    models: dict,
    question: Question,
    submitted_at: str | None = None,
    direction: dict | None = None,
    grammar: dict | None = None,
    batch_line: dict | None = None,
    format_version: int = FORMAT_VERSION,
) -> dict:
    """The payload of a v2 trail's seq-0 record (or v3's, v4's). `submitted_at` (UTC_TIME: when
    the caller submitted the job) is in the records of trails opened since the matter tags;
    `direction` (who directed the job, under what designation: `direction()`) in those opened
    since issue 43; `batch_line` (`batch_line()`) in those of a Batch API line's job opened
    since issue 45. The prompt's token count is bound by its token ids' digest; format 4 no
    longer states it in clear, since it narrows a withheld prompt down among guesses."""
    texts = question.texts()
    payload = {
        "v": format_version,
        "kind": REQUEST,
        "job": job_id,
        "matter": matter,
        "request_id": request_id,
        "attempt": attempt,
        "previous_trail": previous_trail,
        "model_spec": model_spec,
        "models": models,
        "params": question.params,
        "prompt": {
            "given": question.given_kind,
            "digests": {name: bound_digest(trail_salt, name, texts[name]) for name in texts},
        },
    }
    if format_version < sealing.WORKINGS_SINCE:
        payload["prompt"] = {"given": question.given_kind, "token_count": len(question.token_ids)}
        payload["prompt"]["digests"] = {
            name: bound_digest(trail_salt, name, texts[name]) for name in texts
        }
    if submitted_at is not None:
        payload["submitted_at"] = submitted_at
    if direction is not None:
        payload["direction"] = direction
    if grammar is not None:
        payload["grammar"] = grammar
    if batch_line is not None:
        payload["batch_line"] = batch_line
    return payload


def batch_line(*, batch: str, line: int, custom_id: str | None) -> dict:
    """Which line of which Batch API batch a job was, as its request record states it: the
    batch's id, the line's 1-based number in the input file and the caller's `custom_id` (the
    caller's label, in clear like `request_id`), so a verifier names a trail as the caller
    does. Whoever holds the matter's key checks `batch` against the leaf's batch_tag."""
    return {"batch": batch, "line": line, "custom_id": custom_id}


def batch_line_problem(stated: object) -> str | None:
    """What is wrong with a request record's `batch_line`, or None."""
    if not isinstance(stated, dict) or set(stated) != {"batch", "line", "custom_id"}:
        return "must be exactly {batch, line, custom_id}"
    line = stated["line"]
    if not isinstance(stated["batch"], str) or not stated["batch"]:
        return "batch must be a batch id"
    if not isinstance(line, int) or isinstance(line, bool) or line < 1:
        return "line must be a line number (1 or more)"
    if not isinstance(stated["custom_id"], str | None):
        return "custom_id must be a string or null"
    return None


def batch_line_said(stated: dict) -> str:
    """A well-formed batch_line in words, as both verifiers name the line (the custom_id
    quoted as descriptive.quoted and verify.js quote it)."""
    custom_id = stated["custom_id"]
    named = (
        "no custom_id"
        if custom_id is None
        else "custom_id " + json.dumps(custom_id, ensure_ascii=False)
    )
    return f"{named}, line {stated['line']} of batch {stated['batch']}"


def grammar(
    *, trail_salt: str, kind: str, strict: bool, library: str, schema: str, compiled: str
) -> dict:
    """The grammar a structured-output job was decoded under (issue 44), as its request record
    states it: the response_format's type and strict flag and the library that compiled it, in
    clear; the schema (canonical JSON) and the compiled grammar by salted digest, so a reviewer
    holding the schema can confirm it and an examiner without it cannot test guesses."""
    return {
        "type": kind,
        "strict": strict,
        "library": library,
        "schema_digest": bound_digest(trail_salt, GRAMMAR_SCHEMA, schema),
        "grammar_digest": bound_digest(trail_salt, GRAMMAR_COMPILED, compiled),
    }


def direction(
    *, key: str | None, key_owner: str | None, directed_by: str | None, designation: str | None
) -> dict:
    """Who directed a job and under what privilege designation, as its request record states
    it: the API key it came through and that key's owner (the service's), the person the caller
    says directed it and the caller's confidentiality designation (the caller's words); null
    where there is none. Not computed from the texts."""
    return {
        "key": key or None,
        "key_owner": key_owner or None,
        "directed_by": directed_by or None,
        "designation": designation or None,
    }


def answer_payload(
    *, trail_salt: str, answer: Answer, steps: int, format_version: int = FORMAT_VERSION
) -> dict:
    """The payload of a v3 trail's last record, written with the job's result: the output's
    token ids bound by salted digest, like its text (a v2 answer carried them in clear)."""
    ids = canonical_json(list(answer.token_ids))
    return {
        "v": format_version,
        "kind": ANSWER,
        "steps": steps,
        "output_token_count": len(answer.token_ids),
        "output_token_ids_digest": bound_digest(trail_salt, ANSWER_TOKEN_IDS, ids),
        "output_text_digest": bound_digest(trail_salt, ANSWER_TEXT, answer.text),
        "stop_reason": answer.stop_reason,
    }


def answer_digests(answer: dict) -> dict[str, object]:
    """The bound fields an answer record holds digests of, by field name."""
    digests = {ANSWER_TEXT: answer.get("output_text_digest")}
    if answer.get("v", 0) >= sealing.SEALED_SINCE:
        digests[ANSWER_TOKEN_IDS] = answer.get("output_token_ids_digest")
    return digests


def kind_of(payload: dict) -> str:
    """A record's kind; v1 records are all decisions and name none."""
    return payload.get("kind", DECISION) if isinstance(payload, dict) else DECISION


@dataclass
class Contents:
    """What a walk over one trail's payloads found: its request, answer and emitted tokens, and
    every way its structure breaks format v3 (or v2, or v1).

    A v3 decision's tokens are known only where opened: `openings` (slot name -> {"salt",
    "value"}: what a bundle discloses), or the values the store keeps beside each record
    (`observe(..., stored_values=...)`, with `trail_salt`). A sealed token reads None in
    `emitted`, and the decision rule names what it could not re-check without it."""

    trail_id: str
    format_version: int
    request: dict | None = None
    answer: dict | None = None
    decisions: int = 0
    emitted: list[int | None] = field(default_factory=list)
    last_stop: str | None = None
    failures: list[Failure] = field(default_factory=list)
    _ended: bool = False
    _rule: DecisionRule | None = None
    # The prompt's token ids, when the caller holds them (a bundle that discloses them): the
    # decision rule then re-reads copied drafts from the context.
    prompt_ids: list[int] | None = None
    openings: dict[str, dict] = field(default_factory=dict)
    trail_salt: str | None = None  # the store's: each record's stored values are opened with it
    committed_slots: set[str] = field(default_factory=set)  # every slot a decision commits to
    sealed_decisions: int = 0  # format 4: decisions whose workings no opening disclosed
    first_context: int | None = None  # the first decision's context_length, when opened

    def fail(self, seq: int | None, reason: str, scope: str = "trail") -> None:
        self.failures.append(Failure(scope, self.trail_id, seq, reason))

    def observe(self, seq: int, payload: object, stored_values: dict | None = None) -> None:
        """Take the next record's decoded payload (records in seq order); `stored_values`: the
        slot values the store keeps beside a v3 decision record."""
        if not isinstance(payload, dict):
            self.fail(seq, "payload is not a JSON object")
            return
        kind = kind_of(payload)
        if payload.get("v") != self.format_version:
            self.fail(seq, f"record version {payload.get('v')!r} in a v{self.format_version} trail")
        if self._ended:
            self.fail(seq, "a record follows the answer record")
        if self.format_version == 1:
            if "kind" in payload:
                self.fail(seq, "a v1 trail holds only decision records")
            self._decision(seq, payload, step=seq)
        elif seq == 0:
            if kind != REQUEST:
                v = self.format_version
                self.fail(seq, f"seq 0 of a v{v} trail must be the request record, not {kind!r}")
            else:
                self._request(seq, payload)
        elif kind == DECISION:
            if self.format_version >= sealing.SEALED_SINCE:
                payload = self._opened(seq, payload, stored_values)
            if payload is not None:
                self._decision(seq, payload, step=seq - 1)
        elif kind == ANSWER:
            self._answer(seq, payload)
        else:
            self.fail(seq, f"unexpected {kind!r} record")

    def _opened(self, seq: int, sealed: dict, stored_values: dict | None) -> dict | None:
        """A v3 decision with its opened slots in place (None: not in format 3's shape)."""
        problem = sealing.shape_problem(sealed)
        if problem is not None:
            shape = f"format {self.format_version}'s shape"
            self.fail(seq, f"decision record is not in {shape} ({problem})", DECISION_SCOPE)
            return None
        commitments = sealing.slot_commitments(sealed)
        self.committed_slots.update(commitments)
        openings = {name: self.openings[name] for name in commitments if name in self.openings}
        if stored_values is not None:
            if set(stored_values) != set(commitments):
                self.fail(seq, "the values stored beside the record are not its slots'")
            salt = self.trail_salt or ""
            for name, value in stored_values.items():
                if name in commitments and salt:
                    openings[name] = {"salt": sealing.slot_salt(salt, name), "value": value}
        bad = sealing.opening_failures(sealed, openings)
        for name, reason in bad:
            self.fail(seq, f"{name}: {reason}", DECISION_SCOPE)
        failed = {name for name, _ in bad}
        values = {n: o["value"] for n, o in openings.items() if n not in failed}
        return sealing.open_decision(sealed, values)

    def _request(self, seq: int, payload: dict) -> None:
        prompt = payload.get("prompt")
        if not isinstance(payload.get("params"), dict) or not isinstance(prompt, dict):
            self.fail(seq, "request record's params and prompt must be objects")
            return
        digests = prompt.get("digests")
        names = (GIVEN, RENDERED, TOKEN_IDS)
        if not isinstance(digests, dict) or set(digests) != set(names):
            self.fail(seq, f"request record's prompt digests must be exactly {list(names)}")
            return
        if not all(_HEX64.fullmatch(str(digests[name])) for name in names):
            self.fail(seq, "request record's prompt digests must be SHA-256 hex digests")
            return
        if self.format_version >= sealing.WORKINGS_SINCE and "token_count" in prompt:
            self.fail(seq, "a format-4 request record states no prompt.token_count in clear")
        if prompt.get("given") not in GIVEN_KINDS:
            self.fail(seq, f"request record's prompt.given is not one of {list(GIVEN_KINDS)}")
        if "submitted_at" in payload and not UTC_TIME.fullmatch(str(payload["submitted_at"])):
            self.fail(seq, "request record's submitted_at is not a UTC time (…T…:…:….ffffffZ)")
        if "batch_line" in payload and (problem := batch_line_problem(payload["batch_line"])):
            self.fail(seq, f"request record's batch_line {problem}")
        self.request = payload

    def _decision(self, seq: int, payload: dict, *, step: int) -> None:
        if payload.get("step") != step:
            self.fail(seq, f"decision record at seq {seq} says step {payload.get('step')!r}")
        emitted, sealed = payload.get("emitted"), sealing.workings_sealed(payload)
        if sealed:
            self.sealed_decisions += 1  # its tokens are known only from the answer's disclosure
        elif not isinstance(emitted, list):
            self.fail(seq, "decision record has no emitted tokens")
        else:
            self.emitted.extend(emitted)
        if self.decisions == 0 and not sealed:
            self.first_context = payload.get("context_length")
        if self.request is not None and payload.get("request_id") != self.request.get("job"):
            self.fail(seq, "decision record names another job than the request record")
        if self.format_version >= 2:
            if self._rule is None:
                self._rule = DecisionRule(self.request, prompt_ids=self.prompt_ids)
            for reason in self._rule.check(payload):
                self.fail(seq, f"step {step}: {reason}", DECISION_SCOPE)
        self.decisions += 1
        self.last_stop = payload.get("stop")

    def _answer(self, seq: int, payload: dict) -> None:
        self.answer, self._ended = payload, True
        if self.format_version >= sealing.SEALED_SINCE:
            # A sealed step's count is unknown: the answer's digests alone bind its tokens then.
            counted = not self.sealed_decisions
            if counted and payload.get("output_token_count") != len(self.emitted):
                self.fail(seq, "answer's output_token_count is not the decisions' emitted count")
            if not _HEX64.fullmatch(str(payload.get("output_token_ids_digest", ""))):
                self.fail(seq, "answer's output_token_ids_digest is not a SHA-256 hex digest")
        elif payload.get("output_token_ids") != self.emitted:
            self.fail(seq, "answer's output_token_ids are not the decisions' emitted tokens")
        if payload.get("steps") != self.decisions:
            self.fail(seq, f"answer says {payload.get('steps')!r} steps; {self.decisions} recorded")
        if payload.get("stop_reason") not in STOP_REASONS:
            self.fail(seq, f"answer's stop_reason is not one of {list(STOP_REASONS)}")
        expected_stop = self.last_stop or "cancelled"
        if payload.get("stop_reason") != expected_stop:
            self.fail(
                seq,
                f"answer's stop_reason {payload.get('stop_reason')!r} is not the last "
                f"decision's ({expected_stop!r})",
            )
        if not _HEX64.fullmatch(str(payload.get("output_text_digest", ""))):
            self.fail(seq, "answer's output_text_digest is not a SHA-256 hex digest")

    @property
    def unchecked(self) -> set[str]:
        """What the decision rule could not re-check from these records, and why."""
        return self._rule.unchecked if self._rule is not None else set()

    def finish(self, *, sealed_outcome: str | None) -> list[Failure]:
        """Failures of the trail as a whole, once every record was observed; `sealed_outcome`
        is the ledger's outcome, or None while the trail is open."""
        if self.format_version >= 2 and sealed_outcome in SERVED_OUTCOMES and self.answer is None:
            self.fail(None, f"trail sealed {sealed_outcome} has no answer record")
        if sealed_outcome is not None and sealed_outcome not in SERVED_OUTCOMES and self.answer:
            self.fail(None, f"trail sealed {sealed_outcome} holds an answer: none was served")
        return self.failures


@dataclass(frozen=True)
class Claim:
    """What the serving side says about one job: the row a verifier checks against the trail
    the row points at. `answer` is None while the job has served nothing."""

    job_id: str
    trail_id: str
    attempt: int
    matter: str
    request_id: str | None
    model_spec: str
    question: Question
    answer: Answer | None
    submitted_at: str | None = None  # UTC_TIME; compared when the request record holds one
    # The job's texts were destroyed under an order: its trail's salt and openings with them
    # (audit.erasure), so only what is not text is compared.
    destroyed: bool = False
    direction: dict | None = None  # direction(); compared when the request record holds one
    # A structured-output job's grammar as grammar() takes it (kind, strict, library, schema,
    # compiled); None for a job without one. Held to the request record's `grammar`.
    grammar: dict | None = None
    # A Batch API line's job: batch_line() of its line; None for a job that is no line.
    # Compared when the request record holds one.
    batch_line: dict | None = None


def claim_failures(claim: Claim, contents: Contents, trail_salt: str) -> list[Failure]:
    """Every field of the job row that its trail does not bind, named. A destroyed job's texts
    are gone, and so is the salt that would check them: its row is held to the rest."""
    failures: list[Failure] = []

    def fail(reason: str, seq: int | None = None) -> None:
        failures.append(Failure("job", claim.trail_id, seq, f"job {claim.job_id}: {reason}"))

    request = contents.request
    if request is None:
        # A job that failed before its request was recorded (its models did not load, the
        # store refused the insert) served nothing and its trail recorded nothing to compare.
        if claim.answer is not None:
            fail("it holds an output, but its trail recorded no request", 0)
        return failures
    for name, value in (
        ("job", claim.job_id),
        ("attempt", claim.attempt),
        ("matter", claim.matter),
        ("request_id", claim.request_id),
        ("model_spec", claim.model_spec),
        ("params", claim.question.params),
    ):
        if request.get(name) != value:
            fail(f"{name} differs from the trail's request record", 0)
    if "submitted_at" in request and request["submitted_at"] != claim.submitted_at:
        fail("the submission time differs from the request record's submitted_at", 0)
    if "direction" in request and request["direction"] != claim.direction:
        fail("who directed it, or its designation, differs from the request record", 0)
    if "batch_line" in request and request["batch_line"] != claim.batch_line:
        fail("its batch line (batch, line or custom_id) differs from the request record's", 0)
    if claim.destroyed:  # the texts (the schema too), and the salt that checked them, are gone
        answer = contents.answer
        if (claim.answer is None) != (answer is None):
            fail("the trail's answer record and the job's stop reason disagree")
        elif answer is not None and claim.answer.stop_reason != answer.get("stop_reason"):
            fail("stop_reason differs from the answer record")
        return failures
    if ("grammar" in request) != (claim.grammar is not None):
        fail("its response_format and the request record's grammar disagree", 0)
    stated = request.get("grammar")
    held = None if claim.grammar is None else grammar(trail_salt=trail_salt, **claim.grammar)
    if stated is not None and held is not None and stated != held:
        fail("its response_format's schema or grammar differs from the request record", 0)
    prompt = request["prompt"]  # its shape was checked when the record was observed
    if prompt.get("given") != claim.question.given_kind:
        fail("the prompt's form (text, messages or ids) differs from the request record", 0)
    digests = prompt["digests"]
    for name, text in claim.question.texts().items():
        if digests.get(name) != bound_digest(trail_salt, name, text):
            fail(f"{name} differs from the digest in the request record", 0)
    # Format 4 states no prompt length; the first decision's context is the prompt's.
    count = len(claim.question.token_ids)
    if contents.first_context is not None and contents.first_context != count:
        fail(f"the first decision's context_length is not the prompt's {count} tokens", 1)
    answer = contents.answer
    if claim.answer is None:
        if answer is not None:
            fail("the trail recorded an answer the job does not hold")
        return failures
    if answer is None:
        fail("the job holds an output its trail never recorded")
        return failures
    ids = list(claim.answer.token_ids)
    if answer.get("v", 0) >= sealing.SEALED_SINCE:
        recorded = answer.get("output_token_ids_digest")
        if bound_digest(trail_salt, ANSWER_TOKEN_IDS, canonical_json(ids)) != recorded:
            fail("output_token_ids differ from the digest in the answer record")
        # Not an incremental run's, and every decision's tokens known (none sealed).
        walked = contents.decisions == answer.get("steps") and not contents.sealed_decisions
        if walked and ids != contents.emitted:
            fail("output_token_ids are not the tokens the trail's decisions emitted")
    elif ids != answer.get("output_token_ids"):
        fail("output_token_ids differ from the answer record")
    if bound_digest(trail_salt, ANSWER_TEXT, claim.answer.text) != answer.get("output_text_digest"):
        fail("output_text differs from the digest in the answer record")
    if claim.answer.stop_reason != answer.get("stop_reason"):
        fail("stop_reason differs from the answer record")
    return failures


def text_matches(digest: object, salt: str, text: str) -> bool:
    return isinstance(digest, str) and hmac.compare_digest(digest, text_digest(salt, text))


def decision_seq(format_version: int, step: int) -> int:
    """The seq of step `step`'s decision record: v2 puts the request record at seq 0."""
    return step + 1 if format_version >= 2 else step


# How an emitted token was produced, as a recorded decision says: an accepted draft token, the
# target's correction of a rejected one, the bonus after a full acceptance, or the target's own
# token in a step that drafted nothing (a plain decoding step).
DRAFT, CORRECTION, BONUS, TARGET = "draft", "correction", "bonus", "target"


@dataclass(frozen=True)
class EmittedToken:
    token: int
    source: str  # DRAFT, CORRECTION, BONUS or TARGET
    p: str | None  # the target's probability of it at its position (decimal string)
    q: str | None  # the draft's, for an accepted draft token
    text: str | None  # its text piece, when the record has one
    top: list[dict] | None  # the record's target_top entry for its position, if any
    logprob: str | None  # the target's own log-probability of it, when the record has one


def emitted_from(payload: dict) -> list[EmittedToken]:
    """A decision payload's released tokens: its accepted drafted tokens, then the correction
    (a draft token was rejected) or the bonus (none was), cut short where generation stopped."""
    drafted = payload.get("drafted") or []
    accepted = payload.get("accepted_count", 0)
    correction = payload.get("correction") or {}
    texts = payload.get("emitted_text") or []
    tops = payload.get("target_top") or []
    logprobs = payload.get("logprobs") or []
    tokens = []
    for i, token in enumerate(payload.get("emitted") or []):
        if i < accepted and i < len(drafted):
            source, p, q = DRAFT, drafted[i].get("p"), drafted[i].get("q")
        else:
            kind = correction.get("kind")
            replaced = kind in ("residual", "argmax", "coupled")
            source = CORRECTION if replaced else BONUS if drafted else TARGET
            p, q = correction.get("p"), None
        text = texts[i] if i < len(texts) else None
        top = tops[i] if i < len(tops) else None
        logprob = logprobs[i] if i < len(logprobs) else None
        tokens.append(EmittedToken(token, source, p, q, text, top, logprob))
    return tokens

"""audit.evidence.binding: the record format of v3 (and v2) trails and the job-row check, probed
with records that are well hashed but say the wrong thing (the chain alone would pass them)."""

import pytest

from audit.evidence import binding, sealing
from audit.evidence.chain import canonical_json

SALT = "ab" * 32
JOB = "11111111-2222-4333-8444-555555555555"
PARAMS = {"max_tokens": 3, "temperature": "0.0", "top_k": 0, "top_p": "1.0", "seed": 1,
          "draft_length": 2, "eos_token_id": None}  # fmt: skip
QUESTION = binding.Question(
    "prompt",
    "Quote clause 7.",
    "Quote clause 7.",
    (5, 6, 7),
    {**PARAMS, "stop": ["\n"], "stream": False},
)


def request(**over) -> dict:
    payload = binding.request_payload(
        trail_salt=SALT,
        job_id=JOB,
        matter="Doe v. Roe",
        request_id=None,
        attempt=1,
        previous_trail=None,
        model_spec="stub",
        models={"draft": {}, "target": {}},
        question=QUESTION,
        format_version=3,
    )
    return {**payload, **over}


def decision(step: int, emitted, stop=None, before=0, **over) -> dict:
    """A greedy decision that obeys the rule: every token but the last drafted and accepted,
    the last the target's argmax after them; `before` tokens were emitted by earlier steps."""
    drafted = [{"token": t, "q": "1.0", "p": "0.5", "ratio": None, "u": None, "accepted": True}
               for t in emitted[:-1]]  # fmt: skip
    correction = {"token": emitted[-1], "kind": "argmax-bonus", "u": None, "p": "0.5"}
    payload = {"v": 3, "kind": "decision", "request_id": JOB, "step": step, "params": PARAMS,
               "rule": "greedy-argmax", "draft": {}, "target": {}, "context_length": 3 + before,
               "draft_length": len(drafted), "drafted": drafted, "accepted_count": len(drafted),
               "correction": correction, "emitted": emitted, "stop": stop}  # fmt: skip
    return {**payload, **over}


def answer(tokens=(1, 2, 3), text="Seven.", stop="max_tokens", steps=2) -> dict:
    return binding.answer_payload(
        trail_salt=SALT,
        answer=binding.Answer(tuple(tokens), text, stop),
        steps=steps,
        format_version=3,
    )


def walk(payloads, outcome="succeeded", version=3) -> binding.Contents:
    """The walk verify_chain makes: a v3 decision (given clear) is stored sealed, its slots'
    values beside it."""
    contents = binding.Contents("t", version, trail_salt=SALT)
    for seq, payload in enumerate(payloads):
        if version >= 3 and binding.kind_of(payload) == binding.DECISION and seq > 0:
            sealed, values = sealing.seal_decision(payload, SALT)
            contents.observe(seq, sealed, stored_values=values)
        else:
            contents.observe(seq, payload)
    contents.finish(sealed_outcome=outcome)
    return contents


GOOD = [request(), decision(0, [1, 2]), decision(1, [3], stop="max_tokens", before=2), answer()]


def reasons(contents) -> list[str]:
    return [failure.reason for failure in contents.failures]


def test_a_well_formed_trail_has_no_failures():
    contents = walk(GOOD)
    assert contents.failures == []
    assert contents.emitted == [1, 2, 3] and contents.decisions == 2


@pytest.mark.parametrize(
    ("payloads", "expected"),
    [
        ([decision(0, [1])], "seq 0 of a v3 trail must be the request record"),
        ([request(), decision(1, [1])], "decision record at seq 1 says step 1"),
        ([request(), decision(0, [1], request_id="other-job")], "names another job"),
        ([request(), decision(0, [1], params={**PARAMS, "seed": 2})], "differ from the request's"),
        ([*GOOD[:3], answer(tokens=(1, 2))], "output_token_count is not the decisions' emitted"),
        ([*GOOD[:3], answer(steps=3)], "answer says 3 steps; 2 recorded"),
        ([*GOOD[:3], answer(stop="eos")], "stop_reason 'eos' is not the last decision's"),
        ([*GOOD, decision(2, [4])], "a record follows the answer record"),
        (GOOD[:3], "trail sealed succeeded has no answer record"),
        ([request(), request()], "unexpected 'request' record"),
        ([{**GOOD[0], "v": 1}, *GOOD[1:]], "record version 1 in a v3 trail"),
    ],
)
def test_a_trail_that_says_the_wrong_thing_is_named(payloads, expected):
    assert any(expected in reason for reason in reasons(walk(payloads))), reasons(walk(payloads))


def v2(payload: dict) -> dict:
    """A record as format 2 wrote it: tokens in clear, the answer's ids too."""
    if binding.kind_of(payload) != binding.ANSWER:
        return {**payload, "v": 2}
    ids = [1, 2, 3][: payload["output_token_count"]]
    kept = {k: v for k, v in payload.items() if not k.startswith("output_token")}
    return {**kept, "v": 2, "output_token_ids": ids}


def test_a_v2_trail_still_walks_and_its_clear_answer_ids_are_checked():
    assert walk([v2(p) for p in GOOD], version=2).failures == []
    wrong = [*map(v2, GOOD[:3]), {**v2(answer()), "output_token_ids": [1, 2, 9]}]
    assert "answer's output_token_ids are not the decisions' emitted tokens" in reasons(
        walk(wrong, version=2)
    )


def test_a_v3_job_row_whose_tokens_are_not_the_emitted_ones_is_named():
    """The answer record binds the ids by digest; the walk's opened tokens must be them too."""
    forged = binding.Answer((1, 2, 9), "Seven.", "max_tokens")
    trail = walk([*GOOD[:3], answer(tokens=(1, 2, 9))])
    assert trail.failures == []  # the records alone cannot tell: the count is right
    named = [f.reason for f in binding.claim_failures(claim(answer=forged), trail, SALT)]
    assert any("not the tokens the trail's decisions emitted" in r for r in named), named


def test_stored_values_that_do_not_open_their_commitments_are_named():
    sealed, values = sealing.seal_decision(GOOD[1], SALT)
    contents = binding.Contents("t", 3, trail_salt=SALT)
    contents.observe(0, GOOD[0])
    contents.observe(1, sealed, stored_values={**values, "step.0.correction": {"token": 9}})
    assert any("not the one the record commits to" in r for r in reasons(contents))
    missing = binding.Contents("t", 3, trail_salt=SALT)
    missing.observe(0, GOOD[0])
    missing.observe(1, sealed, stored_values={})
    assert "the values stored beside the record are not its slots'" in reasons(missing)


def test_a_failed_trail_needs_no_answer_and_a_cancelled_one_ends_on_cancelled():
    assert walk(GOOD[:2], outcome="failed").failures == []
    cancelled = [request(), decision(0, [1, 2]), answer(tokens=(1, 2), stop="cancelled", steps=1)]
    assert walk(cancelled, outcome="cancelled").failures == []


def test_a_v1_trail_holds_decisions_only_with_step_equal_to_seq():
    v1 = [{"v": 1, "step": 0, "emitted": [1]}, {"v": 1, "step": 1, "emitted": [2]}]
    assert walk(v1, version=1).failures == []
    assert "a v1 trail holds only decision records" in reasons(walk([GOOD[0]], version=1))


def claim(**over) -> binding.Claim:
    fields = dict(
        job_id=JOB,
        trail_id="t",
        attempt=1,
        matter="Doe v. Roe",
        request_id=None,
        model_spec="stub",
        question=QUESTION,
        answer=binding.Answer((1, 2, 3), "Seven.", "max_tokens"),
    )
    return binding.Claim(**{**fields, **over})


def test_a_job_row_that_matches_its_trail_passes():
    assert binding.claim_failures(claim(), walk(GOOD), SALT) == []


@pytest.mark.parametrize(
    ("row", "expected"),
    [
        (claim(job_id="other"), "job differs"),
        (claim(attempt=2), "attempt differs"),
        (claim(request_id="x"), "request_id differs"),
        (claim(answer=binding.Answer((1, 2, 3), "Void.", "max_tokens")), "output_text differs"),
        (claim(answer=binding.Answer((1, 2), "Seven.", "max_tokens")), "output_token_ids differ"),
        (claim(answer=binding.Answer((1, 2, 3), "Seven.", "eos")), "stop_reason differs"),
        (
            claim(
                question=binding.Question("prompt", "Other.", "Other.", (5, 6, 7), QUESTION.params)
            ),
            "prompt.given differs",
        ),  # fmt: skip
        (
            claim(
                question=binding.Question(
                    "prompt_token_ids", [5, 6, 7], "", (5, 6, 7), QUESTION.params
                )
            ),
            "form",
        ),  # fmt: skip
        (
            claim(
                question=binding.Question(
                    "prompt",
                    QUESTION.given,
                    QUESTION.rendered,
                    QUESTION.token_ids,
                    {**QUESTION.params, "stop": []},
                )
            ),
            "params differs",
        ),  # fmt: skip
    ],
)
def test_each_field_of_a_job_row_that_its_trail_does_not_bind_is_named(row, expected):
    failures = binding.claim_failures(row, walk(GOOD), SALT)
    assert any(expected in failure.reason for failure in failures), failures


def test_texts_are_bound_by_their_own_salts():
    digest = binding.bound_digest(SALT, binding.ANSWER_TEXT, "Seven.")
    salt = binding.field_salt(SALT, binding.ANSWER_TEXT)
    assert binding.text_matches(digest, salt, "Seven.")
    assert not binding.text_matches(digest, salt, "Seven")
    # Another field's salt, or another trail's, does not check this text.
    assert not binding.text_matches(digest, binding.field_salt(SALT, binding.RENDERED), "Seven.")
    assert not binding.text_matches(digest, binding.field_salt("cd" * 32, "answer.text"), "Seven.")


def test_a_request_record_is_canonical_json_and_holds_no_text():
    text = canonical_json(request())
    assert "Quote clause" not in text and SALT not in text


@pytest.mark.parametrize(
    ("payloads", "expected"),
    [
        ([request(params=[1, 2]), decision(0, [1])], "params and prompt must be objects"),
        ([request(prompt="text"), decision(0, [1])], "params and prompt must be objects"),
        ([request(), decision(0, [1], params=["seed"])], "params must hold exactly"),
        (
            [request(prompt={"given": "prompt", "token_count": 3, "digests": {"x": "y"}})],
            "prompt digests must be exactly",
        ),
        ([request(prompt={**request()["prompt"], "given": "telepathy"})], "prompt.given is not"),
        ([*GOOD[:3], {**answer(), "stop_reason": "boredom"}], "stop_reason is not one of"),
    ],
)
def test_records_of_the_wrong_shape_are_named_never_a_crash(payloads, expected):
    assert any(expected in reason for reason in reasons(walk(payloads, outcome=None))), reasons(
        walk(payloads, outcome=None)
    )


@pytest.mark.parametrize("outcome", ["failed", "abandoned"])
def test_an_answer_in_a_trail_that_served_none_is_named(outcome):
    assert "holds an answer: none was served" in " ".join(reasons(walk(GOOD, outcome=outcome)))


def test_a_step_that_drafted_nothing_emits_the_target_s_own_token_not_a_bonus():
    plain = decision(0, [4])  # nothing drafted: the correction is the target's argmax
    full = decision(0, [3, 4])  # one drafted, accepted: then the argmax is a bonus
    assert [t.source for t in binding.emitted_from(plain)] == [binding.TARGET]
    assert [t.source for t in binding.emitted_from(full)] == [binding.DRAFT, binding.BONUS]


GRAMMAR = dict(
    kind="json_schema",
    strict=True,
    library="llguidance 1.9.1",
    schema='{"properties":{"parties":{"type":"array"}},"type":"object"}',
    compiled='{"grammars":[...]}',
)


def test_a_structured_output_jobs_schema_is_held_to_its_request_records_grammar():
    stated = binding.grammar(trail_salt=SALT, **GRAMMAR)
    assert set(stated) == {"type", "strict", "library", "schema_digest", "grammar_digest"}
    assert GRAMMAR["schema"] not in canonical_json(stated)  # bound by salted digest, not in clear
    with_grammar = [request(grammar=stated), *GOOD[1:]]
    assert binding.claim_failures(claim(grammar=GRAMMAR), walk(with_grammar), SALT) == []
    other_schema = {**GRAMMAR, "schema": '{"type":"object"}'}
    failures = binding.claim_failures(claim(grammar=other_schema), walk(with_grammar), SALT)
    assert ["schema or grammar differs" in failure.reason for failure in failures] == [True]
    # A row that drops its response_format, or gains one its trail never decoded under:
    for row, records in ((claim(), with_grammar), (claim(grammar=GRAMMAR), GOOD)):
        failures = binding.claim_failures(row, walk(records), SALT)
        assert any("response_format" in failure.reason for failure in failures)


def test_a_destroyed_structured_jobs_blank_response_format_is_not_a_failure():
    """Destruction blanks the schema with the other texts (decoding.destruction): the request
    record's grammar stays, and with the salt gone nothing is left to compare it with."""
    with_grammar = [request(grammar=binding.grammar(trail_salt=SALT, **GRAMMAR)), *GOOD[1:]]
    destroyed = claim(answer=binding.Answer((), "", "max_tokens"), destroyed=True)
    assert binding.claim_failures(destroyed, walk(with_grammar), "") == []


LINE = binding.batch_line(batch="batch_0f3a", line=17, custom_id="doc-17")


def test_a_batch_lines_job_row_is_held_to_the_line_its_request_record_names():
    """The caller's custom_id is how a reviewer names a trail: the portal shows it from the
    row, the verifiers from the record, so the two must agree."""
    with_line = [request(batch_line=LINE), *GOOD[1:]]
    assert reasons(walk(with_line)) == []
    assert binding.claim_failures(claim(batch_line=LINE), walk(with_line), SALT) == []
    for row in (
        claim(batch_line={**LINE, "custom_id": "doc-18"}),  # relabelled after the fact
        claim(batch_line={**LINE, "line": 18}),
        claim(batch_line={**LINE, "batch": "batch_other"}),
        claim(),  # a line's job passed off as a job of no batch
    ):
        failures = binding.claim_failures(row, walk(with_line), SALT)
        assert ["batch line" in failure.reason for failure in failures] == [True], row


@pytest.mark.parametrize(
    ("stated", "expected"),
    [
        ({**LINE, "extra": 1}, "must be exactly {batch, line, custom_id}"),
        ("doc-17", "must be exactly {batch, line, custom_id}"),
        ({**LINE, "batch": ""}, "batch must be a batch id"),
        ({**LINE, "line": 0}, "line must be a line number"),
        ({**LINE, "line": True}, "line must be a line number"),
        ({**LINE, "custom_id": 17}, "custom_id must be a string or null"),
    ],
)
def test_a_malformed_batch_line_is_named(stated, expected):
    found = reasons(walk([request(batch_line=stated), *GOOD[1:]]))
    assert any(f"batch_line {expected}" in reason for reason in found), found


def test_a_batch_line_is_named_as_the_caller_labelled_it():
    assert binding.batch_line_said(LINE) == 'custom_id "doc-17", line 17 of batch batch_0f3a'
    unlabelled = {**LINE, "custom_id": None}
    assert binding.batch_line_said(unlabelled) == "no custom_id, line 17 of batch batch_0f3a"

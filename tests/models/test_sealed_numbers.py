"""The examiner's attack on a bundle that withholds the prompt (issue 39 item 3, ADR 0026), on
the real default model.

An opposing examiner holds the bundle, the disclosed answer and the public model. For each
candidate prompt (the true memo, and the same memo naming another client) they compute what the
model gives at each of the answer's positions: the sampling distribution the decision rule
tests (every token it gives a probability) and the raw log-probabilities of the top tokens.
Every number they find in the bundle's records that equals one of those, to 1e-6, counts for
that candidate. A format-3 bundle singles out the true client (its p, q and log-probabilities
are in clear: the attack works). A format-4 bundle matches the true prompt at no more positions
than a wrong one. And neither the prompt's length nor a draft offset into it is in clear.
"""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest

from audit.evidence import binding, sealing
from audit.evidence.chain import canonical_json
from decoding.engine import (
    FixedSchedule,
    GenerationParams,
    GenerationRequest,
    PromptLookupDrafter,
    SpeculativeDecoder,
)

from .conftest import ListSink

SALT = "5e" * 32
CLIENTS = ("Margarethe Okonkwo", "Bartholomew Asante", "Henrietta Vasquez", "Cornelius Abernathy")
MEMO = (
    "PRIVILEGED AND CONFIDENTIAL. Memorandum to file.\n"
    "Our client, {client}, retained the firm on 3 March 2025 after the brake failure on the "
    "northbound trailer. The fleet manager knew of the defect in February and ordered the "
    "trucks back on the road without repair. The insurer has not been told.\n\n"
    "Question: Repeat the sentence about the fleet manager exactly.\nAnswer:"
)
PARAMS = GenerationParams(max_tokens=40, temperature=0.8, top_k=40, top_p=0.95, seed=11)
TOP = 5
# Numbers a record holds in clear whatever the prompt (a copied draft's q is one-hot).
TRIVIAL = {0.0, 1.0}
NUMBER = re.compile(r"-?\d+\.\d+(?:e[-+]\d+)?")


@pytest.fixture(scope="module")
def target(make_llama, served_gguf):
    return make_llama(path=served_gguf, n_ctx=1024)


@pytest.fixture(scope="module")
def decoded(target):
    """The true memo's job, decoded with prompt lookup (drafts copied from the prompt) and the
    answer's top log-probabilities asked for, as the worker records it."""
    prompt = tuple(target.tokenizer.encode(MEMO.format(client=CLIENTS[0])))
    sink = ListSink()
    decoder = SpeculativeDecoder(
        PromptLookupDrafter(target.vocab_size), target, sink, tokenizer=target.tokenizer
    )
    request = GenerationRequest("job", prompt, PARAMS, top_logprobs=TOP)
    result = decoder.generate(request, schedule=FixedSchedule(6))
    assert sum(r.drafted_count for r in sink.records) > 0  # the attack needs drafts to read
    return prompt, list(result.output_token_ids), [r.payload() for r in sink.records]


def records_text(prompt, decisions, format_version: int) -> str:
    """records.jsonl's payloads as a bundle withholding the prompt carries them: every
    decision sealed as the format seals it, and the request record."""
    question = binding.Question("prompt_token_ids", list(prompt), "", tuple(prompt), {})
    request = binding.request_payload(
        trail_salt=SALT,
        job_id="job",
        matter="Harrow v. Lindqvist",
        request_id=None,
        attempt=1,
        previous_trail=None,
        model_spec="default",
        models={},
        question=question,
        format_version=format_version,
    )
    sealed = [sealing.seal_decision(d, SALT, format_version)[0] for d in decisions]
    return "\n".join(canonical_json(p) for p in [request, *sealed])


def model_numbers(target, prompt, answer) -> list[set[float]]:
    """Per answer position: what the public model gives there after `prompt` (every token's
    probability under the request's sampling, and the top raw log-probabilities)."""
    found = []
    for j in range(len(answer)):
        context = [*prompt, *answer[:j]]
        warped = target.next_distributions(context, 1, PARAMS)[0]
        logits = target.logits(context, 1)[0].astype(np.float64)
        logsoftmax = logits - (logits.max() + math.log(np.exp(logits - logits.max()).sum()))
        top = np.sort(logsoftmax)[-TOP:]
        found.append({float(x) for x in warped[warped > 0]} | {float(x) for x in top})
    return found


def positions_matched(numbers: list[float], per_position: list[set[float]]) -> int:
    """At how many answer positions some number of the bundle equals, to 1e-6, one of the
    model's (numbers every prompt gives, like 1.0, left out)."""
    wanted = [x for x in numbers if x not in TRIVIAL]
    return sum(
        any(abs(x - y) <= 1e-6 for x in wanted for y in values - TRIVIAL) for values in per_position
    )


def matches_by_candidate(target, decoded, format_version: int) -> dict[str, int]:
    prompt, answer, decisions = decoded
    text = records_text(prompt, decisions, format_version)
    numbers = [float(x) for x in NUMBER.findall(text)]
    matched = {}
    for client in CLIENTS:
        candidate = target.tokenizer.encode(MEMO.format(client=client))
        matched[client] = positions_matched(numbers, model_numbers(target, candidate, answer))
    return matched


def test_format_3_numbers_single_out_the_withheld_prompt(target, decoded):
    """The attack works where the numbers are in clear: the proof that it can find a leak."""
    matched = matches_by_candidate(target, decoded, 3)
    true, *wrong = matched.values()
    assert true > max(wrong), matched


def test_format_4_numbers_match_the_true_prompt_no_better_than_a_wrong_one(target, decoded):
    matched = matches_by_candidate(target, decoded, 4)
    true, *wrong = matched.values()
    assert true <= min(wrong), matched


def test_format_4_states_neither_the_prompt_length_nor_a_draft_offset(decoded):
    prompt, _, decisions = decoded
    assert any(d["draft_source"] for d in decisions)  # drafts were copied from the prompt
    records = [json.loads(line) for line in records_text(prompt, decisions, 4).splitlines()]
    request, *sealed = records
    assert "token_count" not in request["prompt"]
    for record in sealed:
        assert set(record) <= {*sealing.CLEAR_KEYS, sealing.WORKINGS}, sorted(record)
    text = canonical_json(sealed)
    for clue in ("offset", "match_length", "context_length", "draft_source", '"p"', "logprob"):
        assert clue not in text
    # The length of the prompt is not any integer the records hold but the request's settings.
    integers = {int(x) for x in re.findall(r'(?<![\w."])\d+(?![\w."])', text)}
    settings = {v for v in PARAMS.__dict__.values() if isinstance(v, int)} | {
        r["step"] for r in sealed
    }
    assert len(prompt) not in integers - settings

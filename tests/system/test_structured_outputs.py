"""Structured outputs (issue 44 item 1) through the official `openai` client, unchanged, against
a live Pathfinder on the real default model: json_schema and json_object answers over contract
excerpts written for this test (none appears elsewhere in the project) parse and validate
against their schema in chat, completions and a Batch API file; their trails verify; greedy
equals the constrained target's sequential greedy (the same request with draft_length 0) and
`manage.py replay` reproduces every decision under the grammar; a
schema the service cannot compile is a 400 naming the field; the portal shows the schema."""

from __future__ import annotations

import io
import json
import time

import jsonschema
import openai
import pytest

from .helpers import Stack, describe, get, submit, wait_for

pytestmark = [pytest.mark.system, pytest.mark.timeout(600)]

MODEL = "smollm2-135m-instruct"
FIXED = "smollm2-structured-fixed"
# Held-out contract excerpts, written for this test before it was first run.
EXCERPTS = [
    "This Equipment Lease is entered into by Halvorsen Marine AS, as lessor, and Brightwater "
    "Ferries Limited, as lessee. It is governed by the laws of Norway, and the courts of Bergen "
    "have exclusive jurisdiction.",
    "The Licensor, Quillfeather Software GmbH, grants Marrow & Finch LLP a non-exclusive licence "
    "to the Software. This Agreement shall be construed in accordance with the laws of the State "
    "of Delaware.",
    "Between Okonkwo Agritech Ltd (the Supplier) and Lakeshore Mills Inc. (the Buyer): the "
    "Supplier shall deliver 400 tonnes of sorghum by 30 June 2027. English law governs this "
    "contract.",
    "Pemberton Estates plc agrees to sell, and Rossi Hospitality S.r.l. agrees to buy, the "
    "property at 14 Harbour Row. This agreement is subject to the laws of Ireland.",
]
# Strings are bounded, as a caller of a small model bounds them: unbounded, SmolLM2's greedy
# answer to the fourth excerpt ran on in one string ("Ireland.EU.EU.EU...") to max_tokens on an
# AVX2-only CPU (docs/limitations.md: logits differ between CPU models), and a schema that lets
# a string run on leaves the answer's end to the model.
CLAUSE = {
    "type": "object",
    "properties": {
        "parties": {
            "type": "array",
            "items": {"type": "string", "maxLength": 40},
            "minItems": 1,
            "maxItems": 4,
        },
        "governing_law": {"type": "string", "maxLength": 40},
    },
    "required": ["parties", "governing_law"],
    "additionalProperties": False,
}
CLAUSE_FORMAT = {
    "type": "json_schema",
    "json_schema": {"name": "clause_facts", "schema": CLAUSE, "strict": True},
}
RESPONSIVE = {
    "type": "object",
    "properties": {
        "responsive": {"type": "boolean"},
        "topic": {"enum": ["lease", "licence", "supply", "sale", "other"]},
    },
    "required": ["responsive", "topic"],
    "additionalProperties": False,
}


def ask(excerpt: str) -> list[dict]:
    return [
        {
            "role": "user",
            "content": "Extract the parties and the governing law of this clause as JSON.\n\n"
            + excerpt,
        }
    ]


@pytest.fixture(scope="module")
def client(postgres_stack) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=f"{postgres_stack.base_url}/v1",
        api_key=postgres_stack.api_key,
        max_retries=0,
        timeout=180,
    )


@pytest.fixture(scope="module")
def fixed_spec(postgres_stack) -> str:
    # A fixed draft schedule: the same step structure on every worker, for token comparisons.
    return postgres_stack.copy_spec(MODEL, FIXED, draft_schedule="fixed")


def verify(stack: Stack, job_id: str) -> None:
    completed = stack.manage("verify_chain", "--job", job_id)
    assert completed.returncode == 0, describe(completed)


def replayed_identical(stack: Stack, job_id: str) -> bool:
    """`manage.py replay`: the job re-run alone under its grammar, every decision compared."""
    completed = stack.manage("replay", job_id, timeout=300)
    assert completed.returncode in (0, 1), describe(completed)
    return completed.returncode == 0 and "identical" in completed.stdout


def test_json_schema_chat_answers_parse_validate_and_equal_sequential_constrained_greedy(
    client, postgres_stack, fixed_spec
):
    for excerpt in EXCERPTS:
        chat = client.chat.completions.create(
            model=fixed_spec,
            messages=ask(excerpt),
            max_tokens=240,  # the longest answer the bounded schema allows
            temperature=0,
            response_format=CLAUSE_FORMAT,
        )
        answer = chat.choices[0].message.content
        assert chat.choices[0].finish_reason == "stop", answer
        jsonschema.validate(json.loads(answer), CLAUSE)
        audit = chat.model_extra["pathfinder"]
        verify(postgres_stack, audit["job_id"])
        assert replayed_identical(postgres_stack, audit["job_id"])
        # The constrained target alone: the same request decoded one token per step.
        alone = submit(
            postgres_stack,
            {"model": fixed_spec, "messages": ask(excerpt), "max_tokens": 240,
             "temperature": 0, "draft_length": 0, "response_format": CLAUSE_FORMAT},
        )  # fmt: skip
        assert alone.status_code == 202, alone.text
        job = wait_for(postgres_stack, alone.json()["id"], timeout=180)
        assert job["output_text"] == answer
        assert job["response_format"] == CLAUSE_FORMAT  # the schema, its key order kept


def test_json_object_on_completions_and_sampled_chat(client, postgres_stack):
    completion = client.completions.create(
        model=MODEL,
        prompt="Return the party names of this clause as a JSON object.\n\n" + EXCERPTS[1],
        max_tokens=80,
        temperature=0,
        extra_body={"response_format": {"type": "json_object"}},
    )
    text = completion.choices[0].text
    if completion.choices[0].finish_reason == "stop":
        assert isinstance(json.loads(text), dict)
    else:  # cut at max_tokens: still a prefix of one JSON object
        assert text.startswith("{")
    sampled = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Is this responsive to a request about leases? "
                   + EXCERPTS[0]}],
        max_tokens=40,
        temperature=0.8,
        seed=11,
        response_format={"type": "json_schema",
                         "json_schema": {"name": "responsive", "schema": RESPONSIVE}},
    )  # fmt: skip
    jsonschema.validate(json.loads(sampled.choices[0].message.content), RESPONSIVE)
    verify(postgres_stack, sampled.model_extra["pathfinder"]["job_id"])
    assert replayed_identical(postgres_stack, sampled.model_extra["pathfinder"]["job_id"])


@pytest.mark.parametrize(
    ("response_format", "param"),
    [
        ({"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "objekt"}}},
         "response_format.json_schema.schema"),
        ({"type": "json_schema", "json_schema": {"schema": CLAUSE}},
         "response_format.json_schema.name"),
        ({"type": "yaml"}, "response_format.type"),
        ("json", "response_format"),
    ],
)  # fmt: skip
def test_a_response_format_the_service_cannot_take_is_a_400_naming_its_field(
    client, response_format, param
):
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(
            model=MODEL, messages=ask(EXCERPTS[0]), max_tokens=8, response_format=response_format
        )
    assert refused.value.body["param"] == param


def test_a_batch_file_of_response_format_lines(client, postgres_stack):
    lines = [
        {
            "custom_id": f"clause-{i}",
            "method": "POST",
            "url": "/v1/chat/completions",
            "body": {
                "model": MODEL,
                "messages": ask(excerpt),
                "max_tokens": 240,
                "temperature": 0,
                "response_format": CLAUSE_FORMAT,
            },
        }  # fmt: skip
        for i, excerpt in enumerate(EXCERPTS[:3])
    ]
    text = "".join(json.dumps(line) + "\n" for line in lines)
    uploaded = client.files.create(
        file=("clauses.jsonl", io.BytesIO(text.encode())), purpose="batch"
    )
    batch = client.batches.create(
        input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    deadline = time.monotonic() + 400
    while (batch := client.batches.retrieve(batch.id)).status not in ("completed", "failed"):
        assert time.monotonic() < deadline, f"batch still {batch.status}"
        time.sleep(1)
    assert batch.status == "completed" and batch.request_counts.completed == 3
    rows = [json.loads(x) for x in client.files.content(batch.output_file_id).text.splitlines()]
    for row in rows:
        body = row["response"]["body"]
        jsonschema.validate(json.loads(body["choices"][0]["message"]["content"]), CLAUSE)
        job_id = body["pathfinder"]["job_id"]
        verify(postgres_stack, job_id)
        job = get(postgres_stack, f"/api/v1/generations/{job_id}").json()
        assert job["response_format"]["json_schema"]["name"] == "clause_facts"

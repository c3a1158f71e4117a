"""The reviewer's desk: sampling defaults from the model's own recommendation, finding a trail
by what was asked or answered, and seeing how each output token was produced.

Texts come from the real default model (SmolLM2-135M-Instruct in llama.cpp) through the API, so
the search runs over prompts and answers nobody in this file wrote by hand.
"""

import json
import re
from html import unescape

import pytest
from django.core.exceptions import ValidationError
from django.db import connection

from decoding.job_input import sampling_defaults
from decoding.models import GenerationJob, Matter, ModelSpec
from decoding.selectors import job_decisions
from decoding.worker.execution import job_run
from reviewers import charts
from reviewers.search import MATCH

from .test_portal import html, records

DEFAULT_MODEL = "smollm2-135m-instruct"
WORD = r"[^\W\d_]{5,}"  # a whole word of letters (Étoile, not its tail "toile")


def chat(owner, content: str, **body) -> GenerationJob:
    response = owner.api.post(
        "/api/v1/generations",
        data=json.dumps(
            {"model": DEFAULT_MODEL, "messages": [{"role": "user", "content": content}], **body}
        ),
        content_type="application/json",
    )
    assert response.status_code == 202, response.json()
    job_run(job_id=response.json()["id"])
    return GenerationJob.objects.get(pk=response.json()["id"])


# --- 1. Sampling defaults --------------------------------------------------------------------


def test_the_default_model_samples_as_its_card_recommends_and_says_where_that_comes_from(owner):
    spec = ModelSpec.objects.get(name=DEFAULT_MODEL)
    assert spec.default_params["temperature"] == 0.2 and spec.default_params["top_p"] == 0.9
    assert "model card" in spec.default_params_source
    listed = owner.api.get("/v1/models").json()["data"]
    shown = next(model for model in listed if model["id"] == DEFAULT_MODEL)
    assert shown["default_params"] == {**sampling_defaults(spec)}
    assert shown["default_params"]["temperature"] == 0.2
    assert shown["default_params_source"] == spec.default_params_source
    stub = next(model for model in listed if model["id"] == "stub")
    assert stub["default_params"]["temperature"] == 1.0  # nothing recommended: OpenAI's


def test_a_request_that_leaves_sampling_out_decodes_with_the_defaults_and_records_them(owner):
    job = chat(owner, "Name three primary colours.", max_tokens=24)
    assert job.status == "succeeded", job.error
    assert (job.temperature, job.top_p) == (0.2, 0.9)
    for record in records(job):
        assert record["params"]["temperature"] == "0.2" and record["params"]["top_p"] == "0.9"


def test_explicit_values_win_over_the_defaults(owner):
    job = chat(owner, "Say hello.", max_tokens=8, temperature=0.0, top_p=1.0)
    assert (job.temperature, job.top_p) == (0.0, 1.0)
    assert {r["params"]["temperature"] for r in records(job)} == {"0.0"}


@pytest.mark.parametrize(
    ("defaults", "named"),
    [
        ({"temprature": 0.2}, "temprature"),
        ({"top_p": 0}, "top_p"),
        ({"temperature": -1}, "temperature"),
        ({"max_tokens": "lots"}, "max_tokens"),
    ],
)
def test_a_spec_whose_defaults_no_request_could_give_is_refused(db, defaults, named):
    spec = ModelSpec.objects.get(name="stub")
    spec.default_params = defaults
    with pytest.raises(ValidationError) as refused:
        spec.full_clean()
    assert named in str(refused.value.message_dict["default_params"])


# --- 2. Find by content ----------------------------------------------------------------------


@pytest.fixture
def answered(owner, outsider):
    """Three real answers in the reviewer's matter and one in a matter not granted to them."""
    return {
        "france": chat(owner, "What is the capital of France?", max_tokens=20, temperature=0),
        "colours": chat(owner, "Name three primary colours.", max_tokens=20, temperature=0),
        "poem": chat(owner, "Write one line about the sea.", max_tokens=20, temperature=0),
        "hidden": chat(outsider, "What is the capital of France?", max_tokens=20, temperature=0),
    }


def listed(reviewer, query: str) -> set:
    response = reviewer.get("/portal/", {"q": query} if query else {})
    assert response.status_code == 200, html(response)
    return {job.id for job in response.context["page"].rows}


def test_the_list_shows_the_start_of_each_question_and_answer(answered, reviewer):
    page = unescape(html(reviewer.get("/portal/")))
    for name in ("france", "colours", "poem"):
        job = answered[name]
        assert job.question in page
        assert job.output_text.strip()[:40] in page
    assert "<|im_start|>" not in page  # the question, not the chat template around it


def test_search_finds_trails_by_the_words_of_the_question(answered, reviewer):
    assert listed(reviewer, "capital France") == {answered["france"].id}
    assert listed(reviewer, "primary colours") == {answered["colours"].id}
    assert listed(reviewer, "sea") == {answered["poem"].id}


def test_search_finds_trails_by_a_word_only_the_answer_holds(answered, reviewer):
    for name in ("france", "colours", "poem"):
        job = answered[name]
        asked = set(re.findall(WORD, job.prompt_text.lower()))
        words = [w for w in re.findall(WORD, job.output_text) if w.lower() not in asked]
        assert words, job.output_text
        assert job.id in listed(reviewer, words[0])


def test_search_keeps_to_the_reviewers_matters_and_the_other_filters(answered, reviewer, owner):
    assert answered["hidden"].id not in listed(reviewer, "capital France")
    other = Matter.objects.create(name="Second v. Case")
    GenerationJob.objects.filter(pk=answered["poem"].pk).update(matter=other)
    assert listed(reviewer, "sea") == set()  # moved to a matter the reviewer was not granted
    response = reviewer.get("/portal/", {"q": "capital", "status": "failed"})
    assert response.context["page"].rows == []


@pytest.mark.parametrize(
    "hostile",
    ["'; DROP TABLE decoding_generationjob; --", '"unclosed', "a & | ! ( :*", "%_%", "-", "or"],
)
def test_a_hostile_search_is_just_words(answered, reviewer, hostile):
    response = reviewer.get("/portal/", {"q": hostile})
    assert response.status_code == 200
    assert GenerationJob.objects.count() == 4


def test_search_still_finds_job_and_request_ids(answered, reviewer, run_job):
    tagged = run_job(request_id="disc-2026-17")
    assert listed(reviewer, "disc-2026") == {tagged.id}
    assert listed(reviewer, str(answered["france"].id)) == {answered["france"].id}


def test_the_search_uses_the_full_text_index(answered):
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute(f"EXPLAIN SELECT id FROM decoding_generationjob WHERE {MATCH}", ["france"])
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "decoding_job_text_search" in plan, plan


# --- 3. Provenance -----------------------------------------------------------------------------


def test_every_output_token_says_how_it_was_produced(run_job, reviewer):
    job = run_job(max_tokens=40, temperature=1.0, top_k=8)
    page = html(reviewer.get(f"/portal/jobs/{job.id}/"))
    output = page.split('<div id="output"')[1].split("</div>")[0]
    links = output.split('<a class="token')[1:]
    expected = []
    for record in records(job):
        n = record["accepted_count"]
        for i, _ in enumerate(record["emitted"]):
            if i < n:
                expected.append(("draft", record["drafted"][i]["p"], record["drafted"][i]["q"]))
            elif record["correction"]["kind"] in ("residual", "coupled"):
                expected.append(("correction", record["correction"]["p"], None))
            elif record["drafted"]:
                expected.append(("bonus", record["correction"]["p"], None))
            else:  # nothing drafted: the target's own token, not a bonus
                expected.append(("target", record["correction"]["p"], None))
    assert {"draft", "correction", "bonus"} <= {source for source, _, _ in expected}
    assert len(links) == len(expected)
    for link, (source, p, q) in zip(links, expected, strict=True):
        assert f'data-source="{source}"' in link
        assert f"p {p}" in link
        assert (f"q {q}" in link) if q else ", q " not in link


def test_the_charts_are_drawn_from_the_records(run_job, reviewer):
    job = run_job(max_tokens=40, temperature=1.0, top_k=8)
    steps = records(job)
    per_step = charts.accepted_per_step(steps)
    assert [row[1:] for row in per_step.rows] == [
        (r["accepted_count"], len(r["drafted"])) for r in steps
    ]
    by_position = charts.acceptance_by_position(steps)
    first = by_position.rows[0]
    assert first[2] == sum(1 for r in steps if r["drafted"])  # every drafting step reaches 1
    assert first[1] == sum(1 for r in steps if r["accepted_count"] >= 1)
    page = html(reviewer.get(f"/portal/jobs/{job.id}/"))
    assert page.count('<rect class="value"') == len(per_step.bars) + len(by_position.bars)
    assert 'role="img" aria-labelledby="chart-steps-caption"' in page
    # Nothing fetched from elsewhere (a CSRF token may hold any letters, "cdn" among them).
    assert not re.search(r'<(script|link|img)[^>]+(src|href)="(https?:)?//', page)


def test_the_prompt_is_shown_in_full_as_the_model_saw_it(owner, reviewer):
    long_question = "Summarise: " + " ".join(f"clause{n}" for n in range(400))
    job = chat(owner, long_question, max_tokens=4, temperature=0)
    page = unescape(html(reviewer.get(f"/portal/jobs/{job.id}/")))
    assert job.prompt_text in page
    assert "<|im_start|>user\n" + long_question in page


def test_the_step_panel_names_the_file_type_the_record_states(owner, reviewer, settings):
    job = chat(owner, "Name three primary colours.", max_tokens=4, temperature=0)
    target = job_decisions(job)[0]["target"]
    assert target["file_type"] == settings.PATHFINDER_DEFAULT_GGUF_TYPE  # read from the file
    page = html(reviewer.get(f"/portal/jobs/{job.id}/"))
    assert f"(file type {target['file_type']})" in page

"""Paths, queries and bodies an attacker sends that answered 5xx (issue 41, item 6): each is a
4xx naming what was wrong, and changes nothing. Written before the fixes, from the outside
check's list: a page number past any integer column, a NUL in an id of the portal's or the
API's paths, metadata keys the store cannot hold."""

from __future__ import annotations

import json

import pytest

from decoding.models import Batch

from .test_batches import create, line, upload

HUGE = "9223372036854775807"


@pytest.mark.parametrize(
    "path",
    [
        f"/portal/?page={HUGE}",
        f"/portal/?page={HUGE}0",
        "/portal/?page=-1",
        "/portal/batches/a%00b/",
        "/portal/jobs/a%00b/",
    ],
)
def test_the_portal_answers_a_hostile_path_with_a_4xx(path, reviewer):
    response = reviewer.get(path)
    assert 400 <= response.status_code < 500, (path, response.status_code)


def test_a_batch_page_past_every_line_is_a_4xx(owner, reviewer):
    batch_id = create(owner, upload(owner, line("one") + "\n").json()["id"]).json()["id"]
    for page in (HUGE, f"{HUGE}0", "-3", "x"):
        response = reviewer.get(f"/portal/batches/{batch_id}/?page={page}")
        assert response.status_code in (200, 400, 404), (page, response.status_code)
        assert response.status_code != 200 or page == "-3"


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("get", "/v1/files/a%00b"),
        ("get", "/v1/files/a%00b/content"),
        ("delete", "/v1/files/a%00b"),
        ("get", "/v1/batches/a%00b"),
        ("post", "/v1/batches/a%00b/cancel"),
        ("get", "/api/v1/generations/a%00b"),
        ("get", "/v1/batches?after=a%00b"),
        ("get", "/v1/files?after=a%00b"),
        ("get", f"/v1/batches?limit={HUGE}"),
    ],
)
def test_the_api_answers_a_nul_in_an_id_with_a_4xx(method, path, owner):
    response = getattr(owner.api, method)(path)
    assert 400 <= response.status_code < 500, (path, response.status_code, response.content[:200])


@pytest.mark.parametrize(
    "metadata",
    [{"a\x00b": "x"}, {"k": "a\x00b"}, {"a\ud800": "x"}, {"k": "a\udfffb"}],
)
def test_metadata_the_store_cannot_hold_is_a_400_naming_it(metadata, owner):
    file_id = upload(owner, line("one") + "\n").json()["id"]
    before = Batch.objects.count()
    body = {"input_file_id": file_id, "endpoint": "/v1/completions", "completion_window": "24h",
            "metadata": metadata}  # fmt: skip
    # As a client sends it: JSON's \u escapes, which decode to the NUL or the lone surrogate.
    raw = json.dumps(body, ensure_ascii=True)
    response = owner.api.post("/v1/batches", raw, content_type="application/json")
    assert response.status_code == 400, response.content[:300]
    assert response.json()["error"]["param"] == "metadata"
    assert Batch.objects.count() == before


@pytest.mark.parametrize("name", ['say "hi".jsonl', "résumé €.jsonl", "plain.jsonl"])
def test_a_files_name_reaches_the_download_intact(name, owner):
    from email.message import Message

    file_id = upload(owner, line("one") + "\n", name=name).json()["id"]
    header = owner.api.get(f"/v1/files/{file_id}/content")["Content-Disposition"]
    header.encode("latin-1")  # a header is Latin-1: a wider name goes in filename*
    parsed = Message()
    parsed["Content-Disposition"] = header
    assert parsed.get_filename() == name, header

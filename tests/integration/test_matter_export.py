"""Producing a matter: `manage.py export_matter` and the portal's action write one bundle with
every sealed trail of the matter's jobs (every attempt, abandoned ones marked) under one
checkpoint, which audit.evidence.offline_verify checks whole, and which no edit survives."""

import datetime
import io
import json
import subprocess
import zipfile

import pytest
from django.core.management import CommandError, call_command

from audit.evidence import checkpoints, descriptive, matter_leaves
from audit.evidence.bundle_format import (
    ANSWER,
    CHECKPOINT,
    INCLUSION_PROOF,
    MANIFEST,
    MATTER,
    REPORT,
    deterministic_zip,
    json_member,
    manifest_member,
    matter_member_names,
    trail_member,
)
from audit.evidence.offline_verify import main as offline_main
from audit.evidence.offline_verify import verify_bundle
from audit.evidence.tile_math import WIDTH, tile_path
from audit.keys import signing_key
from audit.log import latest_checkpoint, log_size
from audit.models import DecisionRecord
from decoding.models import GenerationJob
from decoding.services import job_submit
from decoding.worker.execution import job_run
from reviewers.models import CustodyEvent
from tests.cast import grant, logged_in

from .conftest import JOB_DEFAULTS
from .test_job_recovery import died_mid_decode

MATTER_NAME = "Doe v. Roe"


def chat(api, content: str) -> GenerationJob:
    response = api.post(
        "/api/v1/generations",
        {
            "model": "smollm2-135m-instruct",
            "messages": [{"role": "user", "content": content}],
            "max_tokens": 24,
            "temperature": 0,
        },
        format="json",
    )
    assert response.status_code == 202, response.json()
    job_run(job_id=response.json()["id"])
    return GenerationJob.objects.get(pk=response.json()["id"])


@pytest.fixture
def produced(owner, outsider, run_job, beat):
    """A matter with a real answer, a job whose first attempt was abandoned, a job of last
    January; another matter's job; then, after the checkpoint, a job sealed too late and a job
    still running."""
    answered = chat(owner.api, "What is the capital of France?")
    retried = queued(owner)
    died_mid_decode(retried)  # attempt 1's worker dies mid-decode
    job_run(job_id=retried.id)  # attempt 2 abandons it and answers
    retried.refresh_from_db()
    january = queued(owner)  # submitted last January: its request record says so
    GenerationJob.objects.filter(pk=january.pk).update(
        created_at=datetime.datetime(2026, 1, 15, 12, tzinfo=datetime.UTC)
    )
    job_run(job_id=january.id)
    january.refresh_from_db()
    other = chat(outsider.api, "What is the capital of France?")
    beat()
    late = run_job(max_tokens=8)
    open_trail = died_mid_decode(queued(owner), lease_left_s=600)
    return locals()


def queued(owner) -> GenerationJob:
    job, _ = job_submit(
        matter=owner.key.matter,
        api_key=owner.key,
        model="stub",
        prompt_token_ids=[1, 2, 3],
        enqueue=False,
        **JOB_DEFAULTS,
    )
    return job


def export(tmp_path, *args) -> tuple[bytes, dict]:
    out = tmp_path / "matter.zip"
    call_command("export_matter", "--matter", MATTER_NAME, "--out", str(out), *args)
    data = out.read_bytes()
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        return data, json.loads(archive.read(MATTER))


def key() -> list[str]:
    return [signing_key().verifier]


def test_the_bundle_holds_every_sealed_trail_of_the_matter_and_verifies(produced, tmp_path):
    data, doc = export(tmp_path)
    assert verify_bundle(data, keys=key()) == []
    listed = {t["trail_id"]: t for t in doc["trails"]}
    answered, retried = produced["answered"], produced["retried"]
    assert str(answered.trail_id) in listed and str(retried.trail_id) in listed
    attempts = [t for t in doc["trails"] if t["job_id"] == str(retried.id)]
    assert sorted((t["attempt"], t["outcome"], t["abandoned"]) for t in attempts) == [
        (1, "abandoned", True),
        (2, "succeeded", False),
    ]
    assert str(produced["other"].trail_id) not in listed  # another matter's
    left = {t["trail_id"]: t["reason"] for t in doc["left_out"]}
    assert left[str(produced["late"].trail_id)] == "sealed_after_checkpoint"
    assert left[str(produced["open_trail"].id)] == "open"
    assert doc["matter"] == MATTER_NAME and doc["since"] is None
    indexes = [t["leaf_index"] for t in doc["trails"]]
    assert indexes == sorted(indexes) and max(indexes) < doc["tree_size"]


def test_the_examiners_command_line_verifies_the_matter(produced, tmp_path, capsys):
    export(tmp_path)
    code = offline_main([str(tmp_path / "matter.zip"), "--key", key()[0]])
    printed = capsys.readouterr().out
    assert code == 0, printed
    assert f"MATTER {MATTER_NAME!r}" in printed and "RESULT: VERIFIED" in printed


def test_dates_are_inclusive_days_in_utc(produced, tmp_path):
    _, doc = export(tmp_path, "--since", "2026-01-15", "--until", "2026-01-15")
    assert {t["job_id"] for t in doc["trails"]} == {str(produced["january"].id)}
    _, doc = export(tmp_path, "--since", "2026-01-16")
    assert str(produced["january"].id) not in {t["job_id"] for t in doc["trails"]}
    with pytest.raises(CommandError, match="no sealed trail"):
        export(tmp_path, "--until", "2026-01-14")
    with pytest.raises(CommandError, match="is not a date"):
        export(tmp_path, "--since", "last week")
    with pytest.raises(CommandError, match="until: must not be before since"):
        export(tmp_path, "--since", "2026-02-01", "--until", "2026-01-01")


def test_an_unknown_matter_is_named(db, tmp_path):
    with pytest.raises(CommandError, match="matter: no matter named 'Nobody v. Nothing'"):
        call_command("export_matter", "--matter", "Nobody v. Nothing", "--out", str(tmp_path / "x"))


def test_the_same_selection_rebuilds_byte_for_byte(produced, tmp_path):
    first, _ = export(tmp_path)
    second, _ = export(tmp_path)
    assert first == second


def repacked(data: bytes, change) -> bytes:
    """The bundle with `change(members)` applied and its manifest recomputed: an edit made by
    someone who knows the format, so only the deeper checks can catch it."""
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        members = {info.filename: archive.read(info) for info in archive.infolist()}
    change(members)
    members.pop(MANIFEST)
    ids = [t["trail_id"] for t in json.loads(members[MATTER])["trails"]]
    names = [n for n in matter_member_names(ids) if n in members]
    ordered = [(n, members[n]) for n in names + [n for n in members if n not in names]]
    return deterministic_zip(ordered + [(MANIFEST, manifest_member(ordered))])


def test_no_competent_edit_survives(produced, tmp_path):
    data, doc = export(tmp_path)
    answered = str(produced["answered"].trail_id)
    abandoned = next(t for t in doc["trails"] if t["abandoned"])

    def edit_answer(m):
        m[trail_member(answered, ANSWER)] = b"The capital of France is Lyon."

    def unmark_abandoned(m):
        listed = json.loads(m[MATTER])
        for t in listed["trails"]:
            if t["trail_id"] == abandoned["trail_id"]:
                t["outcome"], t["abandoned"] = "succeeded", False
        m[MATTER] = json_member(listed)

    def rename_matter(m):
        listed = json.loads(m[MATTER])
        listed["matter"] = "Other v. Matter"
        m[MATTER] = json_member(listed)

    def another_proof(m):
        name = trail_member(answered, INCLUSION_PROOF)
        proof = json.loads(m[name])
        proof["proof"] = proof["proof"][::-1] or ["00" * 32]
        m[name] = json_member(proof)

    def other_checkpoint(m):
        m[CHECKPOINT] = m[CHECKPOINT].replace(b"\n", b"\n\n", 1)

    def drop_earlier_attempt(m):
        listed = json.loads(m[MATTER])
        listed["trails"] = [t for t in listed["trails"] if t["trail_id"] != abandoned["trail_id"]]
        m[MATTER] = json_member(listed)
        for name in [n for n in m if n.startswith(f"trails/{abandoned['trail_id']}/")]:
            del m[name]

    cases = {
        drop_earlier_attempt: "is neither in the bundle nor left out",
        edit_answer: "answer.text is not the text",
        unmark_abandoned: "another job or outcome",
        rename_matter: "its request record is of matter",
        another_proof: "does not lead to the checkpoint",
        other_checkpoint: "checkpoint",
    }
    for change, says in cases.items():
        failures = verify_bundle(repacked(data, change), keys=key())
        assert any(says in failure for failure in failures), (change.__name__, failures)


def test_a_trail_smuggled_in_from_another_matter_is_named(produced, tmp_path):
    """Another matter's trail, added with its own records and listing (as a bundle of that
    matter would carry it), is refused: its request record names its own matter."""
    data, doc = export(tmp_path)
    other_out = tmp_path / "other.zip"
    call_command("export_matter", "--matter", "Other v. Matter", "--out", str(other_out))
    with zipfile.ZipFile(other_out) as archive:
        theirs = {i.filename: archive.read(i) for i in archive.infolist()}
    their_doc = json.loads(theirs[MATTER])
    smuggled = their_doc["trails"][0]

    def smuggle(m):
        listed = json.loads(m[MATTER])
        listed["trails"] = sorted([*listed["trails"], smuggled], key=lambda t: t["leaf_index"])
        m[MATTER] = json_member(listed)
        prefix = f"trails/{smuggled['trail_id']}/"
        m.update({name: body for name, body in theirs.items() if name.startswith(prefix)})

    failures = verify_bundle(repacked(data, smuggle), keys=key())
    assert any("request record is of matter 'Other v. Matter'" in f for f in failures), failures


def test_the_report_names_the_answer_the_models_and_the_hashes(produced, tmp_path):
    data, doc = export(tmp_path)
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        pdf = archive.read(REPORT)
        records = archive.read(trail_member(str(produced["answered"].trail_id), "records.jsonl"))
    assert pdf.startswith(b"%PDF-")
    text = subprocess.run(
        ["pdftotext", "-layout", "-", "-"], input=pdf, capture_output=True, check=True
    ).stdout.decode()
    flat = " ".join(text.split())
    answer = produced["answered"].output_text
    assert " ".join(answer.split()) in flat
    request = json.loads(records.splitlines()[0])
    assert request["models"]["target"]["sha256"] in text
    assert produced["answered"].trail_id and str(produced["answered"].trail_id) in text
    assert "902(13)" in text and "902(14)" in text and "ABANDONED" in text
    assert MATTER_NAME in text


def test_a_reviewer_produces_their_matter_in_the_portal_and_it_is_in_custody(produced):
    reviewer = logged_in(grant("rita", MATTER_NAME))
    matter = produced["answered"].matter
    response = reviewer.post("/portal/matters/export", {"export-matter": matter.id})
    assert response.status_code == 200, response.content[:500]
    data = b"".join(response.streaming_content)
    assert verify_bundle(data, keys=key()) == []
    event = CustodyEvent.objects.get(action="export_matter")
    detail = json.loads(event.detail)
    assert detail["matter"] == MATTER_NAME and detail["sha256"] == response["X-Content-SHA256"]
    assert str(produced["answered"].trail_id) in detail["trails"]
    assert reviewer.get("/portal/matters/export").status_code == 405


def test_a_reviewer_cannot_produce_a_matter_not_granted_to_them(produced):
    stranger = logged_in(grant("otto", "Other v. Matter"))
    matter = produced["answered"].matter
    response = stranger.post("/portal/matters/export", {"export-matter": matter.id})
    assert response.status_code == 400 and b"matter" in response.content
    assert not CustodyEvent.objects.filter(action="export_matter").exists()


def test_nothing_to_prove_yet_is_said_not_exported(owner, run_job, tmp_path, signing_host):
    run_job(max_tokens=4)
    with pytest.raises(CommandError, match="no signed checkpoint|no sealed trail"):
        call_command("export_matter", "--matter", MATTER_NAME, "--out", str(tmp_path / "x.zip"))
    assert not (tmp_path / "x.zip").exists()


def test_a_trail_bundle_carries_its_report_too(produced, tmp_path):
    job = produced["answered"]
    out = tmp_path / "trail.zip"
    call_command("export_trail", "--job", str(job.id), "--out", str(out))
    assert verify_bundle(out, keys=key()) == []
    with zipfile.ZipFile(out) as archive:
        pdf = archive.read(REPORT)
    text = subprocess.run(
        ["pdftotext", "-layout", "-", "-"], input=pdf, capture_output=True, check=True
    ).stdout.decode()
    assert " ".join(job.output_text.split()) in " ".join(text.split())
    assert str(job.trail_id) in text and "902(14)" in text
    again = tmp_path / "again.zip"
    call_command("export_trail", "--job", str(job.id), "--out", str(again))
    assert again.read_bytes() == out.read_bytes()  # nothing depends on when it was exported


# Completeness against the public log (issue 22 item 4): the tests below were written before
# the tags, from the examiner's side: what a dishonest export could hide.


def mirrored_log(client, tmp_path, size: int) -> str:
    """The log's public entry bundles as an examiner mirrors them, fetched from /log (the
    service's own view, through Django's test client) into a directory of the same layout."""
    root = tmp_path / "log"
    for index in range(-(-size // WIDTH)):
        path = tile_path(0, index, min(WIDTH, size - index * WIDTH), entries=True)
        response = client.get(f"/log/{path}")
        assert response.status_code == 200, path
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_bytes(response.content)
    return str(root)


def competent(data: bytes, change) -> bytes:
    """repacked, with README.txt, verification.txt and report.pdf made again from the edited
    evidence: the forger knows the format and this repository's code."""

    def change_and_describe(m):
        change(m)
        m.update(descriptive.matter_descriptive(m))

    return repacked(data, change_and_describe)


def test_a_matter_bundle_is_complete_against_the_public_log(produced, client, tmp_path, capsys):
    data, doc = export(tmp_path)
    assert doc["format_version"] == 3 and len(doc["matter_key"]) == 64
    log = mirrored_log(client, tmp_path, doc["tree_size"])
    code = offline_main([str(tmp_path / "matter.zip"), "--key", key()[0], "--log", log])
    printed = capsys.readouterr().out
    assert code == 0, printed
    assert "OK    completeness: the log's" in printed and "RESULT: VERIFIED" in printed
    # Without the log the check is named as not run, not passed.
    offline_main([str(tmp_path / "matter.zip"), "--key", key()[0]])
    assert "SKIP  completeness: not checked: pass --log" in capsys.readouterr().out


def test_a_day_selection_lists_the_matters_other_sealed_trails_as_left_out(
    produced, client, tmp_path
):
    data, doc = export(tmp_path, "--since", "2026-01-16")
    january = str(produced["january"].trail_id)
    left = {t["trail_id"]: t["reason"] for t in doc["left_out"]}
    assert left[january] == "outside_selection"
    log = mirrored_log(client, tmp_path, doc["tree_size"])
    assert verify_bundle(data, keys=key(), log=log) == []


def test_a_trail_dropped_whole_from_a_matter_is_found_in_the_log(produced, client, tmp_path):
    """A first attempt removed with its members and its listing, the descriptive members made
    again: every check of the bundle alone passes, and the log's tags still find it."""
    data, doc = export(tmp_path)
    dropped = str(produced["answered"].trail_id)

    def drop(m):
        listed = json.loads(m[MATTER])
        listed["trails"] = [t for t in listed["trails"] if t["trail_id"] != dropped]
        m[MATTER] = json_member(listed)
        for name in [n for n in m if n.startswith(f"trails/{dropped}/")]:
            del m[name]

    forged = competent(data, drop)
    assert verify_bundle(forged, keys=key()) == []  # what the bundle alone cannot show
    log = mirrored_log(client, tmp_path, doc["tree_size"])
    failures = verify_bundle(forged, keys=key(), log=log)
    assert any(
        f"seals trail {dropped}" in f and "neither in the bundle nor listed as left out" in f
        for f in failures
    ), failures


def test_a_made_up_left_out_entry_is_refused(produced, client, tmp_path):
    """Another matter's sealed trail listed as this matter's left-out trail (to pad the
    count, or to explain away a gap) is not one of this matter's leaves."""
    data, doc = export(tmp_path)
    theirs = produced["other"]

    def pad(m):
        listed = json.loads(m[MATTER])
        listed["left_out"].append(
            {
                "trail_id": str(theirs.trail_id),
                "job_id": str(theirs.id),
                "reason": "outside_selection",
            }
        )
        m[MATTER] = json_member(listed)

    log = mirrored_log(client, tmp_path, doc["tree_size"])
    failures = verify_bundle(competent(data, pad), keys=key(), log=log)
    assert any("seals it as no trail of this matter" in f for f in failures), failures


def test_another_matters_key_finds_none_of_this_matters_leaves(produced, client, tmp_path):

    data, doc = export(tmp_path)
    other_out = tmp_path / "other.zip"
    call_command("export_matter", "--matter", "Other v. Matter", "--out", str(other_out))
    with zipfile.ZipFile(other_out) as archive:
        their_key = json.loads(archive.read(MATTER))["matter_key"]
    log = mirrored_log(client, tmp_path, doc["tree_size"])

    size = doc["tree_size"]
    note = latest_checkpoint(log_size()).note
    leaves = matter_leaves.read_leaves(log, size, checkpoints.parse_unverified(note).root)
    ours = {t["trail_id"] for t in doc["trails"]}
    found = {leaf.trail_id for leaf in matter_leaves.scan(leaves, their_key).matter}
    assert found == {str(produced["other"].trail_id)} and not found & ours
    # And the leaves say when they were sealed; a request record when its job was submitted.
    sealed = [json.loads(leaf) for leaf in leaves]
    assert all(matter_leaves.UTC_TIME.fullmatch(leaf["sealed_at"]) for leaf in sealed)


def test_the_request_record_carries_the_submission_time_and_verify_chain_holds_the_row_to_it(
    produced,
):

    answered = produced["answered"]
    request = json.loads(DecisionRecord.objects.get(trail_id=answered.trail_id, seq=0).payload)
    assert request["submitted_at"] == matter_leaves.utc_time(answered.created_at)
    GenerationJob.objects.filter(pk=answered.pk).update(
        created_at=answered.created_at - datetime.timedelta(days=3)
    )
    out = io.StringIO()
    with pytest.raises(SystemExit):
        call_command("verify_chain", "--job", str(answered.id), stdout=out, stderr=out)
    assert "submission time differs" in out.getvalue()

"""Who asked, and under what privilege (issue 43, item 5): each request record states the key a
job came through, the key's owner, who the caller says directed it and the caller's
confidentiality designation; the portal shows them, and a job row whose direction was rewritten
no longer verifies (United States v. Heppner turned on such facts)."""

import json
import zipfile

from django.core.management import call_command

from audit.evidence import bundle_format
from audit.evidence.offline_verify import verify_bundle
from audit.keys import signing_key
from audit.selectors import trail_record_of_kind
from audit.verification import verify_everything, verify_trails
from decoding.models import ApiKey, GenerationJob
from decoding.protocol.openai_input import ChatCompletionInput
from decoding.worker.execution import job_run

DESIGNATION = "Attorney work product; prepared at the direction of counsel"


def submit(application, **body) -> GenerationJob:
    response = application.api.post(
        "/api/v1/generations",
        {"model": "stub", "prompt_token_ids": [3, 1, 4], "max_tokens": 8, **body},
        format="json",
    )
    assert response.status_code == 202, response.json()
    job_run(job_id=response.json()["id"])
    return GenerationJob.objects.get(pk=response.json()["id"])


def test_the_request_record_states_who_directed_the_job_and_its_designation(owner, reviewer):
    ApiKey.objects.filter(pk=owner.key.pk).update(owner="Smith & Partners LLP")
    job = submit(owner, directed_by="J. Roe, counsel of record", designation=DESIGNATION)
    request = trail_record_of_kind(trail_id=job.trail_id, kind="request")
    assert request["direction"] == {
        "key": "discovery-app",
        "key_owner": "Smith & Partners LLP",
        "directed_by": "J. Roe, counsel of record",
        "designation": DESIGNATION,
    }
    assert verify_trails([job.trail_id], scope="test").ok
    body = owner.api.get(f"/api/v1/generations/{job.id}").json()
    assert (body["directed_by"], body["designation"]) == ("J. Roe, counsel of record", DESIGNATION)
    page = reviewer.get(f"/portal/jobs/{job.id}/").content.decode()
    assert "J. Roe, counsel of record" in page and "Smith &amp; Partners LLP" in page
    assert "Attorney work product" in page

    # Without them the record says so: null, not absent.
    plain = submit(owner)
    stated = trail_record_of_kind(trail_id=plain.trail_id, kind="request")["direction"]
    assert stated == {
        "key": "discovery-app",
        "key_owner": "Smith & Partners LLP",
        "directed_by": None,
        "designation": None,
    }


def test_bundles_state_who_directed_the_job_and_a_forged_statement_fails(owner, beat, tmp_path):
    """The bundle's README.txt and report.pdf say what the request record states (bundle format
    6); since they are made from the records, a README that names someone else fails."""
    ApiKey.objects.filter(pk=owner.key.pk).update(owner="Smith & Partners LLP")
    job = submit(owner, directed_by="J. Roe, counsel of record", designation=DESIGNATION)
    beat()
    out = tmp_path / "b.zip"
    call_command("export_trail", "--job", str(job.id), "--out", str(out))
    with zipfile.ZipFile(out) as archive:
        members = {info.filename: archive.read(info) for info in archive.infolist()}
    said = (
        'Who directed it, as its request record states: API key "discovery-app", the key\'s '
        'owner "Smith & Partners LLP", directed by "J. Roe, counsel of record", confidentiality '
        f'designation "{DESIGNATION}".'
    )
    assert said in members["README.txt"].decode()
    key = signing_key().verifier
    assert verify_bundle(out.read_bytes(), keys=[key]) == []

    members["README.txt"] = members["README.txt"].replace(b"J. Roe", b"A. Poe")
    body = [(n, d) for n, d in members.items() if n != "manifest.json"]
    forged = bundle_format.deterministic_zip(
        [*body, ("manifest.json", bundle_format.manifest_member(body))]
    )
    failures = verify_bundle(forged, keys=[key])
    assert any(f.startswith("descriptive files: README.txt") for f in failures), failures


def test_a_rewritten_designation_or_owner_no_longer_verifies(owner):
    job = submit(owner, designation=DESIGNATION)
    GenerationJob.objects.filter(pk=job.pk).update(designation="")  # the privilege claim erased
    failures = [str(f) for f in verify_everything(full=True).failures]
    assert any("designation, differs from the request record" in f for f in failures), failures
    GenerationJob.objects.filter(pk=job.pk).update(designation=DESIGNATION)
    ApiKey.objects.filter(pk=owner.key.pk).update(owner="Someone Else LLP")
    assert not verify_everything(full=True).ok


def test_the_openai_user_is_who_directed_it_and_designation_is_an_extension():
    body = {
        "model": "smollm2-135m-instruct",
        "messages": [{"role": "user", "content": "Summarise the memo."}],
        "user": "paralegal-17",
        "designation": "Privileged & confidential",
    }
    data = ChatCompletionInput(data=body)
    assert data.is_valid(), data.errors
    native = data.native()
    assert (native["directed_by"], native["designation"]) == (
        "paralegal-17",
        "Privileged & confidential",
    )
    assert "user" not in native


def test_bad_direction_fields_are_400s_naming_the_field_and_store_nothing(owner):
    for body, field in (
        ({"designation": "x" * 201}, "designation"),
        ({"designation": ""}, "designation"),
        ({"directed_by": 7}, "directed_by"),
    ):
        response = owner.api.post(
            "/api/v1/generations",
            json.dumps({"model": "stub", "prompt_token_ids": [1], **body}),
            content_type="application/json",
        )
        assert response.status_code == 400, response.json()
        assert response.json()["error"]["field"] == field
    assert not GenerationJob.objects.exists()

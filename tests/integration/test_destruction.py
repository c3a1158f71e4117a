"""Legal hold, retention and destruction with the proofs kept (issue 43, docs/adr/0029).

Written as the records manager and the opposing examiner would check it: a hold refuses
destruction and changes nothing; released, the matter's texts go from every table while every
proof (verify_chain, a bundle exported before, the checkpoints) still holds, and another
matter's texts stay. And as an attacker with the database role would try it: blanking a salt or
an opening, or calling a job destroyed, without a recorded erasure is refused or caught.
"""

import datetime
import io
import json
import shutil
import subprocess
import sys
import uuid
import zipfile
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.db import connection, transaction
from django.db.utils import DatabaseError
from django.utils import timezone

from audit.evidence import merkle
from audit.evidence.offline_verify import verify_bundle
from audit.keys import signing_key
from audit.models import DecisionRecord, Erasure, Trail
from audit.tiles import Tiles
from audit.verification import verify_everything, verify_trails
from decoding.models import GenerationJob, Matter, Replay
from reviewers.custody_chain import custody_verify
from reviewers.destruction import destroy, destroy_expired
from reviewers.models import CustodyEvent
from reviewers.records import acting_user, retention_set
from reviewers.tasks import destroy_expired_content

from .test_matter_export import chat

MATTER = "Doe v. Roe"
SECRET = "PRIVILEGED: the Harrow settlement figure is 3,918,204 dollars."
OTHER_SECRET = "CONFIDENTIAL: Lindqvist's witness list names Ada Okafor."
NODE = shutil.which("node")
REPO = Path(__file__).parents[2]


def member(bundle: Path, name: str):
    """A member of an exported bundle: JSON ones parsed, texts decoded."""
    with zipfile.ZipFile(bundle) as archive:
        data = archive.read(name)
    return json.loads(data) if name.endswith(".json") else data.decode()


def page_verdict(bundle: Path, key: str, tmp_path: Path) -> dict:
    """verify.js's verdict on the bundle (run under Node, as tests/js/verify_bundle.cjs says)."""
    pins = tmp_path / "pins.json"
    pins.write_text(json.dumps({"logKeys": [key]}))
    done = subprocess.run(
        [NODE, str(REPO / "tests/js/verify_bundle.cjs"), str(bundle), str(pins)],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    return json.loads(done.stdout)


def actions() -> list[str]:
    """The custody log's records-management and export events, in order (page views aside)."""
    events = CustodyEvent.objects.exclude(action=CustodyEvent.Action.VIEW).order_by("seq")
    return list(events.values_list("action", flat=True))


def test_a_matter_under_hold_refuses_destruction_and_retention_and_changes_nothing(owner, reviewer):
    job = chat(owner.api, SECRET)
    call_command("legal_hold", MATTER, "--on", "--reason", "Preservation order, 26-cv-118")
    for page in ("/portal/", f"/portal/jobs/{job.id}/"):
        shown = reviewer.get(page).content.decode()
        assert "Legal hold</strong> on matter Doe v. Roe" in shown
        assert "Preservation order, 26-cv-118" in shown
    with pytest.raises(CommandError, match=r"under a legal hold .*Preservation order, 26-cv-118"):
        call_command("destroy", MATTER, "--order", "Protective order para. 12")
    retention_set(matter_name=MATTER, days=1, user=acting_user())
    assert destroy_expired(now=timezone.now() + datetime.timedelta(days=30)) == []

    job.refresh_from_db()
    assert SECRET in json.dumps(job.messages) and job.output_text and job.destroyed_at is None
    assert Trail.objects.get(pk=job.trail_id).salt
    assert not Erasure.objects.exists()
    assert actions() == ["legal_hold", "retention"]
    hold = CustodyEvent.objects.get(action="legal_hold")
    assert json.loads(hold.detail)["reason"] == "Preservation order, 26-cv-118"
    with pytest.raises(CommandError, match="already under a legal hold"):
        call_command("legal_hold", MATTER, "--on", "--reason", "again")


@pytest.mark.skipif(NODE is None, reason="node is not installed: verify.js cannot run")
def test_released_the_matter_is_destroyed_and_every_proof_still_verifies(
    owner, outsider, reviewer, beat, tmp_path
):
    destroyed = [chat(owner.api, SECRET), chat(owner.api, SECRET + " Second question.")]
    kept = chat(outsider.api, OTHER_SECRET)
    before_checkpoint = beat()
    before = tmp_path / "before.zip"
    call_command("export_trail", "--job", str(destroyed[0].id), "--out", str(before))
    Replay.objects.create(
        job=destroyed[0], trail_id=destroyed[0].trail_id, first_divergence={"t": 1}
    )

    call_command("legal_hold", MATTER, "--on", "--reason", "Preservation order")
    call_command("legal_hold", MATTER, "--off")
    call_command("destroy", MATTER, "--order", "Protective order para. 12 (S.D.N.Y.)")

    for job in destroyed:
        job.refresh_from_db()
        assert (job.prompt_text, job.messages, job.prompt_token_ids) == ("", None, [])
        assert (job.output_text, job.output_token_ids, job.metrics) == ("", [], {})
        assert job.destroyed_under == "Protective order para. 12 (S.D.N.Y.)"
        trail = Trail.objects.get(pk=job.trail_id)
        assert trail.salt == "" and trail.status == "sealed"
        assert not DecisionRecord.objects.filter(trail=trail).exclude(openings="").exists()
        assert Erasure.objects.filter(trail_id=trail.id).exists()
    assert Replay.objects.get().first_divergence is None
    kept.refresh_from_db()
    assert OTHER_SECRET in json.dumps(kept.messages) and kept.output_text
    assert Trail.objects.get(pk=kept.trail_id).salt

    # Every proof holds: the store, each trail, the bundle exported before, the log's growth.
    report = verify_everything(full=True)
    assert report.ok, report.lines()
    assert verify_trails([job.trail_id for job in destroyed], scope="test").ok
    key = signing_key().verifier
    assert verify_bundle(before.read_bytes(), keys=[key]) == []
    after_checkpoint = beat()
    assert after_checkpoint.tree_size >= before_checkpoint.tree_size
    proof = Tiles(after_checkpoint.tree_size).consistency_proof(before_checkpoint.tree_size)
    assert merkle.verify_consistency(
        before_checkpoint.tree_size,
        after_checkpoint.tree_size,
        bytes.fromhex(before_checkpoint.root_hash),
        bytes.fromhex(after_checkpoint.root_hash),
        proof,
    )
    after = tmp_path / "after.zip"
    call_command("export_trail", "--job", str(destroyed[0].id), "--out", str(after))
    assert verify_bundle(after.read_bytes(), keys=[key]) == []
    assert SECRET.encode() not in after.read_bytes()
    produced = tmp_path / "matter.zip"
    call_command("export_matter", "--matter", MATTER, "--out", str(produced))
    assert verify_bundle(produced.read_bytes(), keys=[key]) == []
    assert b"Harrow" not in produced.read_bytes()

    # The bundle made after states the destruction (bundle format 6); the one made before, not.
    erasure = Erasure.objects.get(trail_id=destroyed[0].trail_id)
    when = erasure.erased_at.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    order = "Protective order para. 12 (S.D.N.Y.)"
    assert member(after, "destruction.json") == {
        "destroyed": True, "destroyed_at": when, "destroyed_by": erasure.erased_by, "order": order,
    }  # fmt: skip
    assert member(before, "destruction.json") == {"destroyed": False}
    said = f'Its texts were destroyed on {when} under the order "{order}" (destruction.json).'
    assert said in member(after, "README.txt")
    assert f'destroyed on {when} under the order "{order}", and it discloses none' in member(
        after, "verification.txt"
    )
    assert "2 trail(s) had their texts destroyed under an order" in member(produced, "README.txt")
    for bundle in (after, produced):  # the page's verifier and the examiner's agree
        page = page_verdict(bundle, key, tmp_path)
        assert page["ok"], [(c["name"], c["failures"]) for c in page["checks"] if not c["ok"]]
        assert any(c["name"].endswith("destruction") and "destroyed on" in c["detail"]
                   for c in page["checks"])  # fmt: skip
    independent = subprocess.run(
        [sys.executable, str(REPO / "tests/independent/verify_from_doc.py"), str(after),
         "--key", key],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert independent.returncode == 0, independent.stdout

    # The custody log names who, when, the order and what went; it still verifies.
    assert actions()[-3:] == ["legal_hold", "release_hold", "destroy"]
    event = json.loads(CustodyEvent.objects.get(action="destroy").detail)
    assert event["order"] == "Protective order para. 12 (S.D.N.Y.)"
    assert sorted(event["jobs"]) == sorted(str(job.id) for job in destroyed)
    assert event["trails"] and event["tokens_kept_in_records"] == []
    assert custody_verify(from_start=True)[0].ok

    # The API answers 410 with the reason; the list says destroyed; the other matter reads on.
    gone = owner.api.get(f"/api/v1/generations/{destroyed[0].id}")
    assert gone.status_code == 410
    assert "Protective order para. 12" in gone.json()["error"]["message"]
    listed = owner.api.get("/api/v1/generations").json()["results"]
    assert {row["destroyed"]["order"] for row in listed} == {"Protective order para. 12 (S.D.N.Y.)"}
    assert all(row["output_text"] == "" for row in listed)
    assert owner.api.get(f"/api/v1/generations/{destroyed[0].id}/trail").status_code == 200
    assert outsider.api.get(f"/api/v1/generations/{kept.id}").json()["output_text"]

    # The portal shows when and under what, and no text; replay is refused.
    page = reviewer.get(f"/portal/jobs/{destroyed[0].id}/").content.decode()
    assert f"Destroyed on {destroyed[0].destroyed_at:%Y-%m-%d} under Protective order" in page
    assert "Harrow" not in page
    listing = reviewer.get("/portal/").content.decode()
    assert "destroyed on" in listing and "Harrow" not in listing
    replay = reviewer.post(f"/portal/jobs/{destroyed[0].id}/replay", HTTP_HX_REQUEST="true")
    assert replay.status_code == 409 and "no prompt left to replay" in replay.content.decode()


def test_named_jobs_only_and_an_unfinished_job_is_refused_by_name(owner, run_job):
    first, second = run_job(prompt=(5, 6, 7)), run_job(prompt=(8, 9, 10))
    queued = owner.api.post(
        "/api/v1/generations", {"model": "stub", "prompt_token_ids": [11, 12]}, format="json"
    ).json()["id"]
    with pytest.raises(CommandError, match=f"still run or wait .*{queued}"):
        call_command("destroy", MATTER, "--order", "O-1", "--job", queued)
    with pytest.raises(CommandError, match="no job .* in matter"):
        call_command("destroy", MATTER, "--order", "O-1", "--job", str(uuid.uuid4()))
    with pytest.raises(CommandError, match="is not a job id"):
        call_command("destroy", MATTER, "--order", "O-1", "--job", "not-an-id")
    with pytest.raises(CommandError, match="order: name the order"):
        call_command("destroy", MATTER, "--order", "  ", "--job", str(first.id))
    assert not Erasure.objects.exists() and not CustodyEvent.objects.exists()
    call_command("destroy", MATTER, "--order", "O-1", "--job", str(first.id))
    first.refresh_from_db(), second.refresh_from_db()
    assert first.destroyed_at and first.prompt_token_ids == []
    assert second.destroyed_at is None and second.prompt_token_ids == [8, 9, 10]
    assert verify_everything(full=True).ok
    out = io.StringIO()
    with pytest.raises(CommandError, match="did not replay identical"):
        call_command("replay", str(first.id), stdout=out)
    assert "its texts were destroyed" in out.getvalue() and "'O-1'" in out.getvalue()


def test_beats_retention_task_runs_under_its_lock_and_counts_the_jobs(owner, run_job):
    job = run_job()
    retention_set(matter_name=MATTER, days=1, user=acting_user())
    GenerationJob.objects.filter(pk=job.pk).update(
        created_at=timezone.now() - datetime.timedelta(days=2)
    )
    assert destroy_expired_content() == 1
    job.refresh_from_db()
    assert job.destroyed_under == "retention: 1 days after submission"


def test_retention_destroys_what_is_older_than_the_period(owner, run_job):
    old, new = run_job(prompt=(5, 6, 7)), run_job(prompt=(8, 9, 10))
    later = old.created_at + datetime.timedelta(days=30, microseconds=1)
    assert destroy_expired(now=later) == []  # no retention period: nothing expires
    retention_set(matter_name=MATTER, days=30, user=acting_user())
    done = destroy_expired(now=later)
    assert [d.jobs for d in done] == [[str(old.id)]]
    assert done[0].order == "retention: 30 days after submission"
    old.refresh_from_db(), new.refresh_from_db()
    assert old.destroyed_at and new.destroyed_at is None
    assert verify_everything(full=True).ok


def refused(sql: str, params=()) -> bool:
    """Whether the database refuses the statement (as the application's role would run it)."""
    try:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(sql, params)
    except DatabaseError:
        return True
    return False


def test_the_database_refuses_blanking_a_salt_or_an_opening_without_an_erasure(run_job):
    job = run_job()
    trail = [str(job.trail_id)]
    assert refused("UPDATE audit_trail SET salt = '' WHERE id = %s", trail)
    assert refused("UPDATE audit_decisionrecord SET openings = '' WHERE trail_id = %s", trail)
    # With an erasure, only the blanking passes: no other column may change with it.
    Erasure.objects.create(
        trail_id=job.trail_id, job_id=job.id, matter=MATTER, order="x", erased_by="x",
        erased_at=timezone.now(),
    )  # fmt: skip
    assert refused(
        "UPDATE audit_decisionrecord SET openings = '', seq = seq + 100 WHERE trail_id = %s", trail
    )
    assert refused(
        "UPDATE audit_trail SET salt = '', head_hash = genesis_hash WHERE id = %s", trail
    )
    assert refused("DELETE FROM audit_erasure")
    assert not refused("UPDATE audit_trail SET salt = '' WHERE id = %s", trail)
    assert not refused("UPDATE audit_decisionrecord SET openings = '' WHERE trail_id = %s", trail)


def test_verification_catches_a_row_destroyed_without_an_erasure_and_the_reverse(run_job):
    job, other = run_job(prompt=(5, 6, 7)), run_job(prompt=(8, 9, 10))
    # A job row called destroyed (its texts blanked) with no erasure recorded.
    GenerationJob.objects.filter(pk=job.pk).update(
        prompt_token_ids=[], output_token_ids=[], destroyed_at=timezone.now(), destroyed_under="x"
    )
    # An erasure of a trail whose job row still holds its texts.
    Erasure.objects.create(
        trail_id=other.trail_id, job_id=other.id, matter=MATTER, order="x", erased_by="x",
        erased_at=timezone.now(),
    )  # fmt: skip
    Trail.objects.filter(pk=other.trail_id).update(salt="")
    failures = [str(f) for f in verify_everything(full=True).failures]
    assert any("says destroyed but no erasure records it" in f for f in failures), failures
    assert any("trail was erased but its row was not destroyed" in f for f in failures), failures


def test_the_admin_places_and_releases_a_hold_as_custody_events(operator, owner):
    matter = Matter.objects.get(name=MATTER)
    url = f"/admin/decoding/matter/{matter.pk}/change/"
    response = operator.post(
        url, {"name": MATTER, "retention_days": "90", "place_hold": "Notice of 2026-12-01"}
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    matter.refresh_from_db()
    assert (
        matter.on_hold
        and matter.hold_reason == "Notice of 2026-12-01"
        and matter.retention_days == 90
    )
    assert "Notice of 2026-12-01" in operator.get(url).content.decode()
    operator.post(url, {"name": "Renamed", "retention_days": "90", "release_hold": "on"})
    matter.refresh_from_db()
    assert not matter.on_hold
    assert matter.name == MATTER  # bound into its records: the admin cannot rename it
    assert actions() == ["retention", "legal_hold", "release_hold"]
    assert CustodyEvent.objects.filter(user=operator.user).count() == 3


def test_the_application_role_may_destroy_and_may_still_rewrite_nothing(owner, run_job):
    """As deployed (manage.py grant_app_role): the role blanks what a destruction blanks, through
    the service, and no more."""
    role = "pathfinder_app_destroy_test"
    job = run_job()
    with connection.cursor() as cursor:
        cursor.execute(f"CREATE ROLE {role}")
    call_command("grant_app_role", role, stdout=io.StringIO())
    user = acting_user()
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(f"SET LOCAL ROLE {role}")
        destroy(matter_name=MATTER, order="O-7", user=user)
        cursor.execute("RESET ROLE")
    assert Trail.objects.get(pk=job.trail_id).salt == ""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(f"SET LOCAL ROLE {role}")
        for sql in (
            "UPDATE audit_decisionrecord SET payload = '{}'",
            "DELETE FROM audit_erasure",
            "UPDATE audit_erasure SET \"order\" = 'x'",
        ):
            with pytest.raises(DatabaseError), transaction.atomic():
                cursor.execute(sql)
        cursor.execute("RESET ROLE")
    assert verify_everything(full=True).ok

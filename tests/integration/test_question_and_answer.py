"""Audit format v2 on the real PostgreSQL: a trail binds the question and the answer, what is
served is what was recorded, and the database backstop holds for the application's own role.

The probes are the ones outside checks reported: job rows edited by the least-privilege role
(manage.py grant_app_role, as docs/operations.md deploys it) or by a superuser, a job re-pointed
at another job's trail, TEMP tables shadowing the tables the triggers read.
"""

import io
import json
import subprocess
import sys
import zipfile

import pytest
from django.core.management import CommandError, call_command
from django.db import DatabaseError, connection, transaction
from django.utils import timezone

from audit.evidence import binding, checkpoints, offline_verify, sealing
from audit.evidence.chain import canonical_json
from audit.keys import signing_key
from audit.log import checkpoint_create, latest_checkpoint
from audit.models import Checkpoint, DecisionRecord, LedgerEntry, Trail, VerificationRun
from audit.selectors import trail_record_of_kind
from audit.verification import verify_everything, verify_trails
from decoding.claims import job_question
from decoding.services import job_submit
from decoding.worker.execution import job_run

from .conftest import JOB_DEFAULTS

APP_ROLE = "pathfinder_app_test"
TEXT_MODEL = "smollm2-135m-instruct"


@pytest.fixture
def app_role(db):
    """The least-privilege role, granted as operators grant it (rolled back with the test)."""
    with connection.cursor() as cursor:
        cursor.execute(f"CREATE ROLE {APP_ROLE}")
    call_command("grant_app_role", APP_ROLE, stdout=io.StringIO())
    return APP_ROLE


def as_role(role: str, sql: str, params=None) -> None:
    """Run one statement as `role`, in a savepoint, back to the superuser afterwards."""
    # In a savepoint: if the statement fails, rolling it back undoes SET LOCAL ROLE too.
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(f"SET LOCAL ROLE {role}")
        cursor.execute(sql, params)
        cursor.execute("RESET ROLE")


def verify_all_cli() -> tuple[int, str]:
    out = io.StringIO()
    try:
        call_command("verify_chain", "--all", stdout=out)
    except SystemExit as exc:
        return exc.code, out.getvalue()
    return 0, out.getvalue()


def test_a_trail_opens_with_the_request_and_ends_with_the_answer(run_job):
    job = run_job(prompt=(3, 1, 4, 1, 5), max_tokens=20, stop=["x"], request_id="client-7")
    trail = Trail.objects.get(pk=job.trail_id)
    kinds = list(DecisionRecord.objects.filter(trail=trail).order_by("seq").values_list("kind"))
    assert [k for (k,) in kinds] == ["request"] + ["decision"] * job.steps + ["answer"]
    assert trail.format_version == 5 and len(trail.salt) == 64
    request = trail_record_of_kind(trail_id=trail.id, kind="request")
    assert (request["job"], request["attempt"], request["request_id"]) == (
        str(job.id),
        1,
        "client-7",
    )
    assert request["matter"] == "Doe v. Roe" and request["model_spec"] == "stub"
    assert request["params"]["stop"] == ["x"] and request["params"]["temperature"] == "0.0"
    assert request["prompt"]["given"] == "prompt_token_ids"
    assert "token_count" not in request["prompt"]  # bound by the token ids' digest
    # The digests are salted: the same prompt in another trail has other digests.
    other = run_job(prompt=(3, 1, 4, 1, 5), max_tokens=20, stop=["x"])
    other_request = trail_record_of_kind(trail_id=other.trail_id, kind="request")
    assert other_request["prompt"]["digests"] != request["prompt"]["digests"]
    answer = trail_record_of_kind(trail_id=trail.id, kind="answer")
    ids = canonical_json(job.output_token_ids)
    assert answer["output_token_ids_digest"] == binding.bound_digest(
        trail.salt, binding.ANSWER_TOKEN_IDS, ids
    )
    assert answer["output_token_count"] == len(job.output_token_ids)
    assert answer["stop_reason"] == job.stop_reason and answer["steps"] == job.steps
    ledger = json.loads(LedgerEntry.objects.get(trail_id=trail.id).payload)
    assert ledger["v"] == 5 and ledger["records"] == job.steps + 2
    assert verify_everything().ok


def test_a_text_prompt_binds_the_given_the_rendered_and_the_token_ids(owner, settings):
    settings.PATHFINDER_DEFAULT_MODEL = TEXT_MODEL
    from decoding.models import GenerationJob

    response = owner.api.post(
        "/api/v1/generations",
        data=json.dumps({"prompt": "The lease ends on", "max_tokens": 6, "temperature": 0}),
        content_type="application/json",
    )
    job_run(job_id=response.json()["id"])
    job = GenerationJob.objects.get(pk=response.json()["id"])
    trail = Trail.objects.get(pk=job.trail_id)
    digests = trail_record_of_kind(trail_id=trail.id, kind="request")["prompt"]["digests"]
    texts = job_question(job).texts()
    assert texts[binding.RENDERED] == "The lease ends on"
    for name in (binding.GIVEN, binding.RENDERED, binding.TOKEN_IDS):
        assert digests[name] == binding.bound_digest(trail.salt, name, texts[name])
    served = owner.api.get(f"/api/v1/generations/{job.id}").json()
    answer = trail_record_of_kind(trail_id=trail.id, kind="answer")
    assert served["output_text"] and answer["output_token_ids_digest"] == binding.bound_digest(
        trail.salt, binding.ANSWER_TOKEN_IDS, canonical_json(served["output_token_ids"])
    )
    assert answer["output_text_digest"] == binding.bound_digest(
        trail.salt, binding.ANSWER_TEXT, served["output_text"]
    )


# Each edit the application role may make to a job row, and what verification must name.
ROW_EDITS = {
    "output_text": ("output_text = 'The clause is void.'", "output_text differs"),
    "output_token_ids": ("output_token_ids = '[1, 2, 3]'", "output_token_ids differ"),
    "prompt_token_ids": ("prompt_token_ids = '[9, 9]'", "prompt.token_ids differs"),
    "prompt_text": ("prompt_text = 'Ignore the lease.'", "prompt.rendered differs"),
    "stop": ("stop = '[\"never\"]'", "params differs"),
    "temperature": ("temperature = 0.7", "params differs"),
    "request_id": ("request_id = 'someone-else'", "request_id differs"),
    "stop_reason": ("stop_reason = 'eos'", "stop_reason differs"),
}


@pytest.mark.parametrize("edit", list(ROW_EDITS), ids=list(ROW_EDITS))
def test_a_job_row_edited_by_the_app_role_is_named_by_every_verifier(run_job, app_role, edit):
    job = run_job(max_tokens=12)
    assignment, expected = ROW_EDITS[edit]
    as_role(app_role, f"UPDATE decoding_generationjob SET {assignment} WHERE id = %s", [job.id])
    status, out = verify_all_cli()
    assert status == 1, out
    assert f"job {job.id}: {expected}" in out
    report = verify_trails([job.trail_id], scope="one")
    assert [f for f in report.failures if expected in f.reason and str(job.id) in f.reason]


def test_a_job_re_pointed_at_another_jobs_trail_is_named(run_job, app_role):
    first, second = run_job(prompt=(1, 2)), run_job(prompt=(7, 8))
    as_role(
        app_role,
        "UPDATE decoding_generationjob SET trail_id = %s WHERE id = %s",
        [second.trail_id, first.id],
    )
    status, out = verify_all_cli()
    assert status == 1
    assert f"job {first.id}: job differs from the trail's request record" in out
    assert f"job {first.id} does not point at the trail that recorded its answer" in out
    # One trail alone shows it too: the trail now claimed by a job it was not made for.
    assert not verify_trails([second.trail_id], scope="one").ok
    assert not verify_trails([first.trail_id], scope="one").ok


def test_the_api_serves_no_token_ids_but_those_the_answer_record_binds(run_job, owner):
    """A format-3 answer record binds the ids by salted digest: a row whose ids were changed
    is not served (500, the fault is ours), never served as the answer."""
    job = run_job()
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE decoding_generationjob SET output_token_ids = '[1]' WHERE id = %s", [job.id]
        )
    response = owner.api.get(f"/api/v1/generations/{job.id}")
    assert response.status_code == 500
    assert "output tokens are not the recorded answer" in response.content.decode()


def test_the_app_role_cannot_create_temp_tables(app_role):
    with pytest.raises(DatabaseError, match="permission denied to create temporary tables"):
        as_role(app_role, "CREATE TEMP TABLE audit_trail (id uuid)")


def test_a_temp_table_cannot_shadow_the_tables_the_triggers_read(run_job):
    """As a superuser (who may create TEMP tables): a TEMP audit_trail saying a sealed trail is
    open, then a record appended to the sealed trail. The trigger reads the real table."""
    job = run_job()
    trail = Trail.objects.get(pk=job.trail_id)
    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE TEMP TABLE audit_trail AS SELECT * FROM public.audit_trail WHERE false"
        )
        cursor.execute(
            "INSERT INTO pg_temp.audit_trail SELECT * FROM public.audit_trail WHERE id = %s",
            [trail.id],
        )
        cursor.execute("UPDATE pg_temp.audit_trail SET status = 'open'")
        cursor.execute(
            "CREATE TEMP TABLE audit_decisionrecord AS "
            "SELECT * FROM public.audit_decisionrecord WHERE false"
        )
        with pytest.raises(DatabaseError, match="is missing or sealed"), transaction.atomic():
            cursor.execute(
                "INSERT INTO public.audit_decisionrecord"
                " (trail_id, seq, kind, payload, prev_hash, record_hash, created_at)"
                " VALUES (%s, %s, 'decision', '{}', %s, %s, now())",
                [trail.id, trail.record_count, trail.head_hash, "0" * 64],
            )


@pytest.mark.parametrize("table", ["reviewers_trailverification", "reviewers_signoff"])
def test_verifications_and_sign_offs_are_append_only(run_job, table, app_role):
    from django.contrib.auth import get_user_model

    from reviewers.models import SignOff, TrailVerification

    job = run_job()
    user = get_user_model().objects.create(username="rita")
    verification = TrailVerification.objects.create(
        job=job, trail_id=job.trail_id, ok=True, user=user, at=timezone.now()
    )
    SignOff.objects.create(
        job=job, trail_id=job.trail_id, verification=verification, user=user, at=timezone.now()
    )
    # As the table owner, with the triggers on: the trigger refuses an edit and a delete.
    for statement in (f"UPDATE {table} SET user_id = user_id", f"DELETE FROM {table}"):
        with pytest.raises(DatabaseError, match="append-only"), transaction.atomic():
            connection.cursor().execute(statement)
    # As the application role: not even granted.
    with pytest.raises(DatabaseError, match="permission denied"):
        as_role(app_role, f"UPDATE {table} SET user_id = user_id")


def test_the_latest_checkpoint_is_the_newest_validly_signed_one_no_larger_than_the_log(run_job):
    run_job()
    good = checkpoint_create()
    other_key = checkpoints.generate_signing_key("pathfinder.local/audit-log")[0]
    forged_note = checkpoints.sign_checkpoint(
        "pathfinder.local/audit-log", 1, bytes.fromhex(good.root_hash), other_key
    )
    Checkpoint.objects.create(tree_size=1, root_hash=good.root_hash, note=forged_note)
    assert latest_checkpoint(1) == good
    assert latest_checkpoint(0) is None  # none of the rows is for an empty log
    # A validly signed checkpoint larger than the log (signed for a log that was rolled back)
    # is not taken either.
    private = signing_key().private
    ahead = checkpoints.sign_checkpoint("pathfinder.local/audit-log", 2, bytes(32), private)
    Checkpoint.objects.create(tree_size=2, root_hash=bytes(32).hex(), note=ahead)
    assert latest_checkpoint(LedgerEntry.objects.count()) == good


def test_a_verification_run_is_latest_by_the_order_the_database_gave(run_job):
    run_job()
    verify_everything()
    verify_everything()
    runs = list(VerificationRun.objects.all())
    assert runs[0].id > runs[1].id  # newest first, by id, whatever started_at says


def test_an_export_can_withhold_the_prompt_and_still_verifies_offline(run_job, tmp_path, beat):
    job = run_job(max_tokens=10)
    beat()
    path = tmp_path / "withheld.zip"
    call_command(
        "export_trail",
        "--job",
        str(job.id),
        "--out",
        str(path),
        "--withhold",
        "prompt",
        stdout=io.StringIO(),
    )
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "audit.offline_verify",
            str(path),
            "--key",
            signing_key().verifier,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0, run.stdout
    assert "prompt.rendered withheld" in run.stdout and "answer.text matches" in run.stdout
    assert "QUESTION (prompt.txt, the rendered prompt): (withheld" in run.stdout
    unpinned = subprocess.run(
        [sys.executable, "-m", "audit.offline_verify", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert unpinned.returncode == 3 and "NOT VERIFIED" in unpinned.stdout


def test_withholding_hides_every_token_of_the_withheld_text_and_decisions_stay_checked(
    owner, tmp_path, beat
):
    """Issue 22: with prompt lookup the drafted tokens are the prompt's own n-grams, and every
    decision emits the answer's tokens. Issue 39: every number of a decision derives from the
    prompt too. Format-4 records seal each decision's workings whole, so a bundle withholding
    the prompt (and perhaps the answer) opens none; both verify, and the verdict says that no
    decision was re-checked, and why. The whole bundle opens every one, and re-checks them."""
    from decoding.models import ModelSpec

    ModelSpec.objects.create(
        name="stub-lookup",
        provider="stub",
        revision="stub-v1",
        drafter="prompt_lookup",
        drafter_settings={"min_ngram": 1, "max_ngram": 3},
    )
    job, _ = job_submit(
        matter=owner.key.matter,
        api_key=owner.key,
        model="stub-lookup",
        prompt_token_ids=[5, 6, 7, 5, 6, 7, 5, 6, 7, 5, 6],
        **JOB_DEFAULTS,
    )
    job_run(job_id=job.id)
    job.refresh_from_db()
    beat()
    for group in ("prompt", "answer"):
        withheld = ["prompt"] if group == "prompt" else ["prompt", "answer"]
        path = tmp_path / f"without-{group}.zip"
        call_command("export_trail", "--job", str(job.id), "--out", str(path),
                     *[arg for g in withheld for arg in ("--withhold", g)],
                     stdout=io.StringIO())  # fmt: skip
        with zipfile.ZipFile(path) as bundle:
            members = {name: bundle.read(name) for name in bundle.namelist()}
        records = [json.loads(line) for line in members["records.jsonl"].splitlines()]
        disclosures = json.loads(members["disclosures.json"])
        assert all('"token"' not in line for line in members["records.jsonl"].decode().split())
        assert not any("output_token_ids" in r for r in records)
        assert {n for n in disclosures if n.startswith("step.")} == set()
        assert all(set(r) <= {*sealing.CLEAR_KEYS, sealing.WORKINGS} for r in records[1:-1])
        assert "token_count" not in records[0]["prompt"]
        if group == "prompt":
            assert disclosures["prompt.token_ids"] == {"withheld": True}
            assert disclosures["answer.token_ids"]["value"] == job.output_token_ids
        else:
            assert disclosures["answer.token_ids"] == {"withheld": True}
            assert members["answer.txt"] == b""
        found = offline_verify.check_bundle(path.read_bytes(), keys=[signing_key().verifier])
        checks = {c.name: c for c in found}
        assert all(c.ok for c in checks.values()), [str(c) for c in checks.values() if not c.ok]
        assert "none of the" in checks["decision rule"].detail
        assert "workings are sealed" in checks["decision rule"].detail
    path = tmp_path / "whole.zip"
    call_command("export_trail", "--job", str(job.id), "--out", str(path), stdout=io.StringIO())
    with zipfile.ZipFile(path) as bundle:
        disclosures = json.loads(bundle.read("disclosures.json"))
    steps = [r["step"] for r in records if r.get("kind") == "decision"]
    assert {n for n in disclosures if n.startswith("step.")} == {
        f"step.{s}.workings" for s in steps
    }
    assert offline_verify.verify_bundle(path.read_bytes(), keys=[signing_key().verifier]) == []


def test_withholding_the_answer_alone_is_refused_since_the_rest_regenerates_it(
    run_job, tmp_path, beat
):
    """Issue 39 item 4: the prompt, the recorded parameters and the named model decode the
    answer again token for token (a replay does exactly that), so a bundle that withholds the
    answer alone would only pretend to hide it. Nothing is written."""
    job = run_job(max_tokens=10)
    beat()
    path = tmp_path / "answer-only.zip"
    with pytest.raises(CommandError, match="regenerate the answer token for token") as refused:
        call_command("export_trail", "--job", str(job.id), "--out", str(path),
                     "--withhold", "answer", stdout=io.StringIO())  # fmt: skip
    assert "--withhold prompt --withhold answer" in str(refused.value)
    assert not path.exists()
    call_command("export_trail", "--job", str(job.id), "--out", str(path),
                 "--withhold", "prompt", "--withhold", "answer", stdout=io.StringIO())  # fmt: skip
    assert offline_verify.verify_bundle(path.read_bytes(), keys=[signing_key().verifier]) == []


def test_a_v2_trail_whose_records_carry_the_text_in_clear_cannot_withhold_it():
    """Format-2 records carry tokens in clear: --withhold refuses them, saying where."""
    from audit.export import carried_in_clear

    request = {"v": 2, "kind": "request", "prompt": {"token_count": 4}}
    copied = {"v": 2, "kind": "decision", "step": 3, "emitted": [9],
              "draft_source": {"reference": "context", "offset": 2, "match_length": 1}}  # fmt: skip
    assert (
        carried_in_clear([request, copied], "prompt")
        == "step 3 drafted tokens copied from the prompt"
    )
    assert carried_in_clear([request, copied], "answer") == "step 3 emitted the answer's tokens"


def test_a_job_cancelled_after_its_worker_died_served_nothing_and_verifies(owner):
    """Its trail holds the request and no answer (sealed abandoned); the row says cancelled with
    no result. Nothing was served, so nothing is claimed: verification passes, the API answers."""
    from audit.store import trail_append, trail_open, trail_seal
    from decoding.claims import job_request_payload
    from decoding.models import GenerationJob
    from decoding.services import job_submit
    from decoding.worker import runtime

    job, _ = job_submit(
        matter=owner.key.matter,
        api_key=owner.key,
        model="stub",
        prompt_token_ids=[1, 2, 3],
        max_tokens=8,
        temperature=0.0,
        seed=1,
    )
    trail = trail_open(job_id=job.id, attempt=1)
    models, _ = runtime.models_for(job.model_spec)
    trail_append(trail_id=trail.id, payload=job_request_payload(job, trail, models))
    trail_seal(trail_id=trail.id, outcome="abandoned")
    GenerationJob.objects.filter(pk=job.pk).update(
        status="cancelled", attempts=1, trail_id=trail.id
    )
    assert verify_trails([trail.id], scope="one").ok
    assert verify_everything().ok
    served = owner.api.get(f"/api/v1/generations/{job.id}")
    assert served.status_code == 200
    assert (served.json()["output_text"], served.json()["output_token_ids"]) == ("", [])


def test_a_trail_row_that_names_another_job_or_attempt_than_its_request_is_named(run_job):
    job = run_job()
    with connection.cursor() as cursor:
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
        cursor.execute("ALTER TABLE audit_trail DISABLE TRIGGER ALL")
        cursor.execute("UPDATE audit_trail SET attempt = 2 WHERE id = %s", [job.trail_id])
    report = verify_trails([job.trail_id], scope="one")
    assert "trail row's attempt differs from its request" in " ".join(
        f.reason for f in report.failures
    )

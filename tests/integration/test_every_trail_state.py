"""Every state a trail can end in exports and verifies (issue 40, item 1), and the verdicts on it
never disagree: a matter holding a job that succeeded, one that failed before its first record
(its model did not load), one that failed mid-way, one cancelled while queued and one while
running, one of a batch that expired before it ran, a job whose first attempt was superseded,
and a batch with a refused line, crossed with every export (each trail alone, with and without
its texts withheld; the matter whole, by export_matter and by the portal; a day range; the
batch; matter exports withhold nothing, by design) and three verifiers: ours
(audit.evidence.offline_verify with the log's tiles), the page's (verify.js, run here under Node
on the same files), and one written from docs/audit-format.md alone by an examiner who did not
read our code (tests/independent/verify_from_doc.py). verify_chain and the portal's badge must
say what the bundles say.

Then the examiner's attacks on completeness (item 2), each written as the tampered bundle
against a real export of this matter: a trail left out for a reason the log refutes, the
selection narrowed, a format downgrade, a batch line claimed outside its batch.
"""

from __future__ import annotations

import datetime
import functools
import http.server
import io
import json
import shutil
import subprocess
import sys
import threading
import zipfile
from pathlib import Path

import pytest
from django.core.management import call_command
from django.utils import timezone

from audit.evidence.bundle_format import MATTER, json_member
from audit.evidence.checkpoints import parse_unverified
from audit.evidence.offline_verify import check_bundle, verify_bundle
from audit.keys import signing_key
from audit.log import latest_checkpoint, log_size
from audit.models import Trail
from decoding import batches, services
from decoding.models import Batch, GenerationJob, ModelSpec
from decoding.services import job_cancel, job_submit
from decoding.worker import execution, leases
from decoding.worker.sinks import STEPS_PER_COMMIT
from reviewers.selectors import with_verification
from tests.cast import grant, logged_in

from .conftest import JOB_DEFAULTS
from .test_batches import create, line, run_batch, upload
from .test_job_recovery import died_mid_decode
from .test_matter_export import competent, mirrored_log

REPO = Path(__file__).parents[2]
NODE = shutil.which("node")


def submitted(owner, **overrides) -> GenerationJob:
    job, _ = job_submit(
        matter=owner.key.matter,
        api_key=owner.key,
        prompt_token_ids=[1, 2, 3],
        enqueue=False,
        **{**JOB_DEFAULTS, "model": "stub", **overrides},
    )
    return job


def stopped_at_step(monkeypatch, step: int, then) -> None:
    """At the given step boundary, call `then(job_id)`: a cancel arriving, or a fault."""
    seen = []
    original = execution._step_boundary

    def boundary(watch):
        asked = original(watch)

        def check():
            seen.append(1)
            if len(seen) == step:
                then(watch.job_id)
            return asked()

        return check

    monkeypatch.setattr(leases, "STEP_CHECK_S", 0)
    monkeypatch.setattr(execution, "_step_boundary", boundary)


@pytest.fixture
def every_state(owner, run_job, beat, monkeypatch):
    """One job of the matter per state a trail (or a job without one) can end in."""
    states = {"succeeded": run_job(max_tokens=4)}

    default = ModelSpec.objects.get(name="smollm2-135m-instruct")
    ModelSpec.objects.create(
        name="vanishing", provider=default.provider, path=default.path,
        revision=default.revision, drafter=default.drafter,
        drafter_settings=default.drafter_settings,
    )  # fmt: skip
    no_model = submitted(owner, model="vanishing")
    ModelSpec.objects.filter(name="vanishing").update(path="/nowhere/vanished.gguf")  # gone since
    execution.job_run(job_id=no_model.id)
    states["failed before any record"] = no_model

    def fault(job_id):
        raise RuntimeError("the decoder fell over")

    mid_way = submitted(owner, max_tokens=1024)
    stopped_at_step(monkeypatch, STEPS_PER_COMMIT + 8, fault)  # records committed before the fault
    execution.job_run(job_id=mid_way.id)
    states["failed mid-way"] = mid_way

    def cancel(job_id):
        GenerationJob.objects.filter(pk=job_id).update(cancel_requested_at=timezone.now())

    running = submitted(owner, max_tokens=200)
    stopped_at_step(monkeypatch, 3, cancel)
    execution.job_run(job_id=running.id)
    states["cancelled running"] = running
    monkeypatch.undo()

    queued = submitted(owner)
    job_cancel(job=queued)
    states["cancelled queued"] = queued

    superseded = submitted(owner)
    died_mid_decode(superseded)
    execution.job_run(job_id=superseded.id)
    states["superseded attempt"] = superseded

    late = create(owner, upload(owner, line("late") + "\n").json()["id"]).json()["id"]
    batches.batches_advance()  # its line becomes a queued job, then its window passes
    Batch.objects.filter(pk=late).update(expires_at=timezone.now() - datetime.timedelta(seconds=1))
    batches.batches_advance()
    batches.batches_advance()
    states["expired"] = GenerationJob.objects.get(batch_line__batch_id=late)

    batch = run_batch(owner, [line("ok"), line("ok too", prompt=(8, 8)), "{not json"])
    lines = GenerationJob.objects.filter(batch_line__batch_id=batch["id"])
    states["batch line"], states["another batch line"] = lines.order_by("batch_line__line")
    beat()
    for job in states.values():
        job.refresh_from_db()
    return {"jobs": states, "batch": Batch.objects.get(pk=batch["id"])}


def trails_of(jobs) -> list[Trail]:
    ids = [job.id for job in jobs.values()]
    return list(Trail.objects.filter(job_id__in=ids).order_by("created_at"))


def test_the_states_are_the_ones_named(every_state):
    jobs = every_state["jobs"]
    ended = {name: (job.status, job.failure) for name, job in jobs.items()}
    assert ended == {
        "succeeded": ("succeeded", ""),
        "failed before any record": ("failed", "model_unavailable"),
        "failed mid-way": ("failed", "generation_failed"),
        "cancelled running": ("cancelled", ""),
        "cancelled queued": ("cancelled", ""),
        "expired": ("cancelled", ""),
        "superseded attempt": ("succeeded", ""),
        "batch line": ("succeeded", ""),
        "another batch line": ("succeeded", ""),
    }
    counts = {t.job_id: (t.outcome, t.record_count) for t in trails_of(jobs)}
    assert counts[jobs["failed before any record"].id] == ("failed", 0)
    assert counts[jobs["failed mid-way"].id][0] == "failed"
    assert counts[jobs["failed mid-way"].id][1] > 1
    assert jobs["cancelled queued"].trail_id is None
    assert jobs["expired"].trail_id is None
    assert Batch.objects.get(lines__job=jobs["expired"]).status == "expired"
    outcomes = sorted(t.outcome for t in Trail.objects.filter(job_id=jobs["superseded attempt"].id))
    assert outcomes == ["abandoned", "succeeded"]


class LogServer:
    """The log's tiles as the service publishes them, mirrored into a directory and served over
    HTTP, as an examiner's copy would be, for verify.js (which fetches them)."""

    def __init__(self, root: str):
        handler = functools.partial(_Quiet, directory=root)
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def page_verdict(data: bytes, tmp_path: Path, log_url: str | None) -> dict:
    """verify.js's verdict on a bundle, with the log's key pinned and, for a matter, its log."""
    bundle, pins = tmp_path / "page.zip", tmp_path / "pins.json"
    bundle.write_bytes(data)
    origin = parse_unverified(latest_checkpoint(log_size()).note).origin
    log = {"url": log_url, "origin": origin} if log_url else None
    pins.write_text(json.dumps({"logKeys": [signing_key().verifier], "log": log}))
    script = REPO / "tests" / "js" / "verify_bundle.cjs"
    done = subprocess.run(
        [NODE, str(script), str(bundle), str(pins)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def independent_verdict(data: bytes, tmp_path: Path, log: str) -> subprocess.CompletedProcess:
    """The verdict of the verifier an examiner wrote from the doc alone (exit 0: VERIFIED)."""
    bundle = tmp_path / "independent.zip"
    bundle.write_bytes(data)
    script = REPO / "tests" / "independent" / "verify_from_doc.py"
    return subprocess.run(
        [sys.executable, str(script), str(bundle), "--key", signing_key().verifier, "--log", log],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def verdicts(data: bytes, tmp_path: Path, log: str, log_url: str) -> tuple[list[str], dict]:
    """(offline_verify's failures, verify.js's verdict), which must agree, and so must the
    independent verifier's."""
    checks = check_bundle(data, keys=[signing_key().verifier], log=log)
    python = [f"{c.name}: {reason}" for c in checks for reason in c.failures]
    page = page_verdict(data, tmp_path, log_url)
    failed = [(c["name"], c["failures"]) for c in page["checks"] if not c["ok"]]
    assert page["ok"] == (python == []), (python, failed)
    if page["ok"]:  # one list of checks, in one order (a failure may stop either earlier)
        assert [c["name"] for c in page["checks"]] == [c.name for c in checks]
    independent = independent_verdict(data, tmp_path, log)
    assert (independent.returncode == 0) == (python == []), (python, independent.stdout)
    return python, page


@pytest.fixture
def log_of(client, tmp_path):
    servers = []

    def mirror(size: int) -> tuple[str, str]:
        root = mirrored_log(client, tmp_path / f"log-{size}", size)
        servers.append(LogServer(root))
        return root, servers[-1].url

    yield mirror
    for server in servers:
        server.close()


def exported(tmp_path: Path, name: str, command: str, *args) -> bytes:
    out = tmp_path / f"{name}.zip"
    call_command(command, *args, "--out", str(out))
    return out.read_bytes()


def matter_doc(data: bytes) -> dict:
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        return json.loads(archive.read(MATTER))


@pytest.mark.skipif(NODE is None, reason="node is not installed: verify.js cannot run")
def test_every_state_crossed_with_every_export_verifies_and_the_verdicts_agree(
    every_state, owner, tmp_path, log_of
):
    jobs = every_state["jobs"]
    size = latest_checkpoint(log_size()).tree_size
    log, log_url = log_of(size)
    matter = owner.key.matter.name
    today = datetime.datetime.now(datetime.UTC).date().isoformat()

    bundles = {}
    for trail in trails_of(jobs):
        for withheld in ((), ("--withhold", "prompt")):
            name = f"trail {trail.id}{' withheld' if withheld else ''}"
            bundles[name] = exported(
                tmp_path, "trail", "export_trail", "--trail", str(trail.id), *withheld
            )
    bundles["the matter"] = exported(tmp_path, "m", "export_matter", "--matter", matter)
    bundles["today"] = exported(
        tmp_path, "d", "export_matter", "--matter", matter, "--since", today, "--until", today
    )
    services.batch_bundle_export(batch=every_state["batch"], out=tmp_path / "batch.zip")
    bundles["the batch"] = (tmp_path / "batch.zip").read_bytes()
    reviewer = logged_in(grant("rita", matter))  # the portal's "Produce a matter"
    response = reviewer.post("/portal/matters/export", {"export-matter": owner.key.matter.id})
    assert response.status_code == 200, response.content[:300]
    bundles["the portal's production"] = b"".join(response.streaming_content)
    assert bundles["the portal's production"] == bundles["the matter"]  # one selection, one bundle

    for name, data in bundles.items():
        python, page = verdicts(data, tmp_path, log, log_url)
        assert python == [], (name, python)
        if name in ("the matter", "today", "the batch", "the portal's production"):
            assert any(c["name"] == "completeness" and c["ok"] for c in page["checks"]), name

    # The trail with nothing to bind is left out of the matter for a reason the log shows.
    whole = matter_doc(bundles["the matter"])
    no_record = str(jobs["failed before any record"].trail_id)
    assert {e["trail_id"]: e["reason"] for e in whole["left_out"]} == {no_record: "no_request"}
    batch = matter_doc(bundles["the batch"])
    line_trails = {str(jobs[name].trail_id) for name in ("batch line", "another batch line")}
    assert {t["trail_id"] for t in batch["trails"]} == line_trails
    assert batch["batch"] == every_state["batch"].pk
    assert {e["reason"] for e in batch["left_out"]} == {"outside_selection", "no_request"}

    # verify_chain and the portal's badge say what the bundles say.
    printed = io.StringIO()
    call_command("verify_chain", "--all", stdout=printed)
    assert "INTACT" in printed.getvalue()
    badges = with_verification(GenerationJob.objects.filter(trail_id__isnull=False))
    assert {job.verification_state for job in badges} == {"verified"}


@pytest.fixture
def produced(every_state, owner, tmp_path, log_of):
    size = latest_checkpoint(log_size()).tree_size
    log, log_url = log_of(size)
    matter = owner.key.matter.name
    whole = exported(tmp_path, "m", "export_matter", "--matter", matter)
    services.batch_bundle_export(batch=every_state["batch"], out=tmp_path / "batch.zip")
    return {
        "jobs": every_state["jobs"],
        "whole": whole,
        "batch": (tmp_path / "batch.zip").read_bytes(),
        "log": log,
        "log_url": log_url,
    }


def rewritten(data: bytes, change) -> bytes:
    def change_doc(members):
        doc = json.loads(members[MATTER])
        change(doc, members)
        members[MATTER] = json_member(doc)

    return competent(data, change_doc)


def dropped(doc: dict, members: dict, trail_id: str, reason: str) -> None:
    """The trail moved from the bundle to left_out, for `reason`."""
    entry = next(t for t in doc["trails"] if t["trail_id"] == trail_id)
    doc["trails"].remove(entry)
    doc["left_out"].append({"trail_id": trail_id, "job_id": entry["job_id"], "reason": reason})
    for name in [n for n in members if n.startswith(f"trails/{trail_id}/")]:
        del members[name]


def attacked(produced, tmp_path, data: bytes) -> list[str]:
    python, _ = verdicts(data, tmp_path, produced["log"], produced["log_url"])
    return python


@pytest.mark.skipif(NODE is None, reason="node is not installed: verify.js cannot run")
@pytest.mark.parametrize("reason", ["open", "sealed_after_checkpoint", "no_request"])
def test_a_sealed_trail_left_out_for_a_reason_the_log_refutes_fails(produced, tmp_path, reason):
    gone = str(produced["jobs"]["succeeded"].trail_id)
    forged = rewritten(produced["whole"], lambda d, m: dropped(d, m, gone, reason))
    # What the bundle alone shows: nothing (completeness needs the log).
    assert verify_bundle(forged, keys=[signing_key().verifier]) == []
    failures = attacked(produced, tmp_path, forged)
    assert failures and all(f.startswith("completeness:") for f in failures), failures
    assert any(f"trail {gone} is left out as '{reason}', but leaf" in f for f in failures)


@pytest.mark.skipif(NODE is None, reason="node is not installed: verify.js cannot run")
def test_a_batch_line_claimed_outside_its_batch_fails(produced, tmp_path):
    gone = str(produced["jobs"]["batch line"].trail_id)

    forged = rewritten(produced["batch"], lambda d, m: dropped(d, m, gone, "outside_selection"))
    assert verify_bundle(forged, keys=[signing_key().verifier]) == []  # the bundle alone
    failures = attacked(produced, tmp_path, forged)
    assert len(failures) == 1 and "but leaf" in failures[0], failures
    assert f"trail {gone} is left out as 'outside_selection'" in failures[0]
    assert "shows it in the selection" in failures[0]


@pytest.mark.skipif(NODE is None, reason="node is not installed: verify.js cannot run")
def test_a_narrowed_selection_cannot_hide_a_trail(produced, tmp_path):
    """The forger narrows the days to before the jobs ran and calls a trail outside them: true
    of the trail by its leaf, but every trail still held fails the narrowed selection. (A
    selection narrowed to leave out every trail of some days is a smaller production, which the
    verdict names: matter.json's since and until are what an examiner compares with the ask.)"""
    gone = str(produced["jobs"]["succeeded"].trail_id)
    yesterday = datetime.datetime.now(datetime.UTC).date() - datetime.timedelta(days=1)

    def narrow(doc, members):
        dropped(doc, members, gone, "outside_selection")
        doc["until"] = yesterday.isoformat()

    failures = attacked(produced, tmp_path, rewritten(produced["whole"], narrow))
    assert failures and all("it is not of the selection" in f for f in failures), failures


@pytest.mark.skipif(NODE is None, reason="node is not installed: verify.js cannot run")
@pytest.mark.parametrize("to_format", [1, 2])
def test_a_downgraded_matter_bundle_fails_with_and_without_the_log(produced, tmp_path, to_format):
    def downgrade(doc, members):
        doc["format_version"] = to_format
        del doc["batch"]
        if to_format == 1:
            del doc["matter_key"]
        for entry in doc["left_out"]:  # format 2's reasons were free text
            entry["reason"] = "outside the selection: its job was submitted on another day"

    forged = rewritten(produced["whole"], downgrade)
    alone = verify_bundle(forged, keys=[signing_key().verifier])
    assert alone and all("listing" in f and "so a bundle of it" in f for f in alone), alone
    failures = attacked(produced, tmp_path, forged)
    assert any(f.startswith("completeness:") for f in failures), failures


@pytest.mark.skipif(NODE is None, reason="node is not installed: verify.js cannot run")
def test_an_unknown_reason_is_refused_without_the_log(produced, tmp_path):
    gone = str(produced["jobs"]["succeeded"].trail_id)
    forged = rewritten(
        produced["whole"], lambda d, m: dropped(d, m, gone, "privileged: withheld by counsel")
    )
    failures = verify_bundle(forged, keys=[signing_key().verifier])
    assert any("no reason a verifier can check" in f for f in failures), failures
    attacked(produced, tmp_path, forged)  # and the page agrees

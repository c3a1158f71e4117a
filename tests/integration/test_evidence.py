"""The global Merkle log, its signed checkpoints, and the evidence bundle a court can check with
nothing but the offline verifier."""

import subprocess
import sys

import pytest
from django.core.management import CommandError, call_command
from django.db import connection

from audit.evidence import checkpoints
from audit.keys import signing_key
from audit.log import checkpoint_create
from audit.models import Checkpoint
from audit.verification import verify_everything


def rogue(sql, params=None):
    with connection.cursor() as cursor:
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
        cursor.execute("ALTER TABLE audit_ledgerentry DISABLE TRIGGER ALL")
        cursor.execute("ALTER TABLE audit_checkpoint DISABLE TRIGGER ALL")
        cursor.execute(sql, params)


def offline_verify(path, *extra) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "audit.offline_verify", str(path), *extra],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_checkpoint_signs_the_log_and_is_kept_while_the_log_is_unchanged(run_job, settings):
    run_job()
    run_job(prompt=(4, 5))
    first = checkpoint_create()
    assert first.tree_size == 2
    signed = checkpoints.parse_and_verify(first.note, signing_key().verifier)
    assert (signed.size, signed.root.hex()) == (2, first.root_hash)
    assert settings.PATHFINDER_CHECKPOINT_KEY_FILE.stat().st_mode & 0o777 == 0o600
    assert checkpoint_create() == first
    run_job(prompt=(6,))
    assert checkpoint_create().tree_size == 3
    assert verify_everything().ok


def test_rewriting_a_sealed_leaf_breaks_the_signed_root(run_job):
    job = run_job()
    checkpoint_create()
    rogue(
        "UPDATE audit_ledgerentry SET payload = replace(payload, 'succeeded', 'failed')"
        " WHERE trail_id = %s",
        [job.trail_id],
    )
    reasons = [f.reason for f in verify_everything().failures if f.scope == "checkpoint"]
    assert any("no longer hash to the signed root" in reason for reason in reasons), reasons


def test_a_forged_checkpoint_note_fails_its_signature(run_job):
    run_job()
    checkpoint = checkpoint_create()
    rogue("UPDATE audit_checkpoint SET note = replace(note, '\n1\n', '\n9\n')")
    failures = [str(f) for f in verify_everything().failures]
    assert any(f"checkpoint {checkpoint.id}" in failure for failure in failures), failures


def test_the_checkpoint_command_writes_the_note_to_a_directory(run_job, tmp_path, capsys):
    run_job()
    call_command("checkpoint", "--out", str(tmp_path / "published"))
    written = tmp_path / "published" / "checkpoint-1.txt"
    assert written.read_text() == Checkpoint.objects.get().note


def test_an_exported_bundle_verifies_offline_and_any_changed_byte_fails(run_job, tmp_path, beat):
    job = run_job(max_tokens=20)
    run_job(prompt=(9, 9))  # another trail in the log: the proof must not need it
    bundle = tmp_path / "evidence.zip"
    with pytest.raises(CommandError, match="sealed after the newest signed checkpoint"):
        call_command("export_trail", "--job", str(job.id), "--out", str(bundle))
    beat()
    call_command("export_trail", "--job", str(job.id), "--out", str(bundle))

    checked = offline_verify(bundle, "--key", signing_key().verifier)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "FAIL" not in checked.stdout

    data = bundle.read_bytes()
    for offset in (10, len(data) // 3, len(data) // 2, len(data) - 10):
        tampered = tmp_path / f"tampered-{offset}.zip"
        tampered.write_bytes(data[:offset] + bytes([data[offset] ^ 0x01]) + data[offset + 1 :])
        assert offline_verify(tampered).returncode == 1, f"a changed byte at {offset} passed"

    other_key = checkpoints.generate_signing_key("someone-else")[1]
    assert offline_verify(bundle, "--key", other_key).returncode == 1


def test_an_open_trail_cannot_be_exported(owner, tmp_path):
    from audit.store import trail_open
    from decoding.models import GenerationJob

    trail = trail_open(job_id=GenerationJob().id, attempt=1)
    with pytest.raises(Exception, match="still open"):
        call_command("export_trail", "--trail", str(trail.id), "--out", str(tmp_path / "x.zip"))

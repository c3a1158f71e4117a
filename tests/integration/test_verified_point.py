"""The verified-up-to point a run of the whole store leaves (audit.anchored): made only by a run
that found everything intact under a checkpoint, MAC'd under the secret key so a row written by
anyone else is named, never trusted; `full` ignores it. (That an anchored trail is not walked
again, and that a rewritten or deleted record still is, needs rows committed before the point:
tests/system/test_live_service.py checks it on a real stack.)"""

from django.utils import timezone

from audit.models import VerificationRun
from audit.verification import verify_everything
from tests.integration.test_tamper_detection import rogue


def test_an_intact_run_leaves_a_point_and_a_forged_one_is_named(run_job, beat):
    run_job()
    run_job(prompt=(4, 5))
    checkpoint = beat()
    assert verify_everything().ok
    run = VerificationRun.objects.order_by("-id").first()
    assert (run.anchored_size, run.anchored_root) == (checkpoint.tree_size, checkpoint.root_hash)
    assert run.snapshot_xmin is not None and len(run.point_mac) == 64

    # Rows written in this very transaction are newer than any point: they are walked again.
    again = verify_everything()
    assert again.ok and again.records_checked == again.records_covered > 0
    assert any("0 anchored trails" in note for note in again.notes)

    VerificationRun.objects.create(
        scope="all",
        ok=True,
        anchored_size=checkpoint.tree_size,
        anchored_root=checkpoint.root_hash,
        snapshot_xmin=run.snapshot_xmin + 10**6,  # "everything up to later was verified"
        point_mac=run.point_mac,
        started_at=timezone.now(),
        finished_at=timezone.now(),
    )
    forged = verify_everything()
    assert not forged.ok
    assert [f.reason for f in forged.failures] == [
        f"verification run {run.id + 2}'s verified point does not check (its MAC)"
    ]
    assert forged.records_checked == forged.records_covered  # nothing taken on its word
    full = verify_everything(full=True)
    assert full.ok and any("every record walked" in note for note in full.notes)


def test_a_broken_store_leaves_no_point(run_job, beat):
    job = run_job()
    beat()
    rogue(
        "UPDATE audit_decisionrecord SET payload = payload || ' ' WHERE trail_id = %s AND seq = 1",
        [job.trail_id],
    )
    assert not verify_everything().ok
    assert VerificationRun.objects.get().anchored_size is None

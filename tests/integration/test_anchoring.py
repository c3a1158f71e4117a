"""History anchored outside the database, on real parts: a witness process of our own
(`python -m audit.witness`, C2SP tlog-witness), OpenSSL's own RFC 3161 authority, and published
checkpoint files, against the real PostgreSQL.

The probes are the ones outside checks reported: a database superuser who rewrites a decision
with the project's own chain functions, recomputes its chain, head and ledger entry, deletes the
checkpoint rows and signs anew; a log rolled back as a restored backup rolls it back; a witness
that is down; a bundle signed by another key.
"""

import base64
import io
import json
import subprocess
import sys
import zipfile

import pytest
import requests
from django.core.management import CommandError, call_command
from django.db import connection

from audit.evidence import chain, checkpoints, merkle, sealing
from audit.keys import SigningKeyMissing, signing_key
from audit.log import checkpoint_create, witness_status
from audit.models import Checkpoint, DecisionRecord, LedgerEntry, Trail
from audit.publish import PublishConflict, published_path
from audit.selectors import clear_payload
from audit.verification import verify_everything, verify_trails
from pathfinder_site.health import readiness
from tests.tsa import OpenSSLAuthority, TsaServer
from tests.witnesses import WitnessProcess


@pytest.fixture
def witness(tmp_path, signing_host):
    process = WitnessProcess(
        tmp_path / "witness", name="witness.example/w1", log_keys=[signing_host.verifier]
    )
    yield process
    process.stop()


@pytest.fixture
def witnessed(settings, witness):
    settings.PATHFINDER_WITNESSES = [witness.spec]
    settings.PATHFINDER_WITNESS_QUORUM = 1
    settings.PATHFINDER_WITNESS_TIMEOUT_S = 5.0
    return witness


@pytest.fixture
def tsa(tmp_path):
    directory = tmp_path / "tsa"
    directory.mkdir()
    server = TsaServer(OpenSSLAuthority(directory))
    yield server
    server.close()


def as_superuser(sql: str, params=None) -> None:
    """Raw SQL with every audit trigger off, as a rogue superuser runs it (rolled back with the
    test)."""
    with connection.cursor() as cursor:
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
        for table in (
            "audit_decisionrecord",
            "audit_trail",
            "audit_ledgerentry",
            "audit_checkpoint",
        ):
            cursor.execute(f"ALTER TABLE {table} DISABLE TRIGGER ALL")
        cursor.execute(sql, params)


def offline_verify(path, *args) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "audit.offline_verify", str(path), *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def failures_of(report) -> str:
    return "\n".join(str(failure) for failure in report.failures)


def test_keygen_writes_a_private_key_and_prints_the_verifier_key_last(witness):
    assert witness.key_file.stat().st_mode & 0o777 == 0o600
    key = checkpoints.parse_verifier_key(witness.verifier, alg=checkpoints.ALG_COSIGNATURE)
    assert key.name == "witness.example/w1"


def test_a_checkpoint_is_cosigned_published_and_checked_against_the_log(run_job, witnessed):
    run_job()
    checkpoint = checkpoint_create()
    assert witnessed.verifier in checkpoints.cosignatures(checkpoint.note, [witnessed.verifier])
    assert witness_status(checkpoint).ok
    published = published_path(1)
    assert published.read_text() == checkpoint.note  # with the cosignature, as published
    # The witness serves what it cosigned (its monitoring API).
    origin = checkpoints.parse_unverified(checkpoint.note).origin
    import hashlib

    served = requests.get(
        f"{witnessed.url}/{hashlib.sha256(origin.encode()).hexdigest()}/checkpoint", timeout=5
    )
    assert served.status_code == 200 and served.text.startswith(origin)
    # The log grows: the witness checks the consistency proof from size 1 and cosigns again.
    run_job(prompt=(5, 6))
    second = checkpoint_create()
    assert second.tree_size == 2 and witness_status(second).ok
    assert readiness()["alerts"] == []
    assert verify_everything().ok


def test_the_witness_answers_as_the_spec_says(run_job, witnessed, signing_host):
    run_job()
    run_job(prompt=(8,))
    leaves = [
        p.encode() for p in LedgerEntry.objects.order_by("seq").values_list("payload", flat=True)
    ]
    origin = "pathfinder.local/audit-log"

    def note(size: int, key: str = signing_host.private) -> str:
        return checkpoints.sign_checkpoint(origin, size, merkle.root(leaves[:size]), key)

    def post(old: int, proof: list[bytes], body: str) -> requests.Response:
        lines = [f"old {old}", *(base64.b64encode(p).decode() for p in proof)]
        data = ("\n".join(lines) + "\n\n" + body).encode()
        return requests.post(f"{witnessed.url}/add-checkpoint", data=data, timeout=5)

    stranger = checkpoints.generate_signing_key("unknown.example/log")[0]
    unknown = checkpoints.sign_checkpoint(
        "unknown.example/log", 1, merkle.root(leaves[:1]), stranger
    )
    assert post(0, [], unknown).status_code == 404
    impostor = checkpoints.generate_signing_key(origin)[0]  # same name, another key
    assert post(0, [], note(1, impostor)).status_code == 403
    assert post(2, [], note(1)).status_code == 400  # old size above the checkpoint's
    first = post(0, [], note(1))
    assert first.status_code == 200 and first.text.startswith("\u2014 witness.example/w1 ")
    conflict = post(0, [], note(2))  # it cosigned size 1 since
    assert conflict.status_code == 409 and conflict.text == "1\n"
    assert conflict.headers["Content-Type"].startswith("text/x.tlog.size")
    bad_proof = [bytes(32)]
    assert post(1, bad_proof, note(2)).status_code == 422
    assert post(1, merkle.consistency_proof(1, leaves[:2]), note(2)).status_code == 200
    # It keeps the size it cosigned durably: after a restart a rollback is still refused.
    witnessed.stop()
    witnessed.start()
    assert post(0, [], note(1)).text == "2\n"
    assert post(2, [], note(1)).status_code == 400


def test_a_witness_that_is_down_leaves_the_checkpoint_signed_and_raises_the_alert(
    run_job, witnessed
):
    witnessed.stop()
    run_job()
    checkpoint = checkpoint_create()
    checkpoints.parse_and_verify(checkpoint.note, signing_key().verifier)  # still signed
    assert witness_status(checkpoint).cosigned == 0 and not witness_status(checkpoint).ok
    ready = readiness()
    assert ready["checks"]["checkpoint"]["ok"] is False
    assert ready["alerts"] == ["checkpoint: 0 of the 1 cosignatures needed"]
    from pathfinder_site.metrics_db import DatabaseCollector

    gauges = {family.name: family for family in DatabaseCollector().collect()}
    assert gauges["pathfinder_checkpoint_witness_quorum_met"].samples[0].value == 0
    assert published_path(1).exists()  # published all the same, for whoever checks it


def test_a_consistent_rewrite_by_a_superuser_is_caught_by_the_published_checkpoints(
    run_job, witnessed
):
    """Rewrite one decision of the newest trail with audit.evidence.chain's own functions,
    recompute its
    chain, head and ledger entry, delete the checkpoint rows and sign anew."""
    run_job(prompt=(1, 2))
    job = run_job(prompt=(3, 4), max_tokens=12)
    checkpoint_create()
    assert verify_everything().ok
    trail = Trail.objects.get(pk=job.trail_id)
    records = list(DecisionRecord.objects.filter(trail=trail).order_by("seq"))
    target = records[1]
    clear = clear_payload(target.payload, target.openings)
    clear["rationale"] = "Rewritten."
    forged, values = sealing.seal_decision(clear, trail.salt, trail.format_version)
    prev = target.prev_hash
    for record in records[1:]:
        payload = chain.canonical_json(forged) if record.pk == target.pk else record.payload
        openings = chain.canonical_json(values) if record.pk == target.pk else record.openings
        digest = chain.record_hash(str(trail.id), record.seq, prev, payload)
        as_superuser(
            "UPDATE audit_decisionrecord SET payload = %s, openings = %s, prev_hash = %s, "
            "record_hash = %s WHERE id = %s",
            [payload, openings, prev, digest, record.pk],
        )
        prev = digest
    as_superuser("UPDATE audit_trail SET head_hash = %s WHERE id = %s", [prev, trail.id])
    entry = LedgerEntry.objects.get(trail_id=trail.id)
    leaf = json.loads(entry.payload)
    leaf["head"] = prev
    payload = chain.canonical_json(leaf)
    as_superuser(
        "UPDATE audit_ledgerentry SET payload = %s, entry_hash = %s WHERE id = %s",
        [payload, chain.ledger_entry_hash(entry.seq, entry.prev_hash, payload), entry.pk],
    )
    as_superuser("DELETE FROM audit_checkpoint")
    # Signing anew: the witness refuses the other root at the size it cosigned, and the
    # published file of that size is not overwritten.
    with pytest.raises(PublishConflict, match="checkpoint-2.txt already holds another"):
        checkpoint_create()
    resigned = Checkpoint.objects.get()
    assert witness_status(resigned).cosigned == 0
    # Inside the database everything agrees again; the published checkpoint does not.
    report = verify_everything()
    assert not report.ok
    assert "published checkpoint-2.txt: the log's first 2 trails no longer hash" in failures_of(
        report
    )
    assert [f for f in report.failures if f.scope == "trail"] == []  # the chain itself is whole


def test_a_rolled_back_log_is_named_by_the_published_checkpoints(run_job, witnessed):
    run_job(prompt=(1,))
    lost = run_job(prompt=(2,))
    checkpoint_create()
    # A backup restored from before the second job: its trail, records and leaf are gone.
    as_superuser("DELETE FROM audit_checkpoint")
    as_superuser("DELETE FROM audit_ledgerentry WHERE trail_id = %s", [lost.trail_id])
    as_superuser("DELETE FROM audit_decisionrecord WHERE trail_id = %s", [lost.trail_id])
    as_superuser("DELETE FROM audit_trail WHERE id = %s", [lost.trail_id])
    as_superuser("DELETE FROM decoding_generationjob WHERE id = %s", [lost.id])
    report = verify_everything()
    assert "published checkpoint-2.txt: signs 2 trails, the log holds 1: the log was rolled " in (
        failures_of(report)
    )
    # A checkpoint of the smaller log is signed, but the witness will not go back.
    checkpoint = checkpoint_create()
    assert checkpoint.tree_size == 1 and witness_status(checkpoint).cosigned == 0


def test_timestamps_come_from_the_authority_and_bundles_carry_them(
    run_job, witnessed, tsa, settings, tmp_path
):
    settings.PATHFINDER_TSA_URL = tsa.url
    job = run_job()
    checkpoint = checkpoint_create()
    assert checkpoint.timestamp_token and tsa.requests == 1
    assert published_path(1).with_suffix(".tsr").read_bytes() == bytes(checkpoint.timestamp_token)
    bundle = tmp_path / "bundle.zip"
    call_command("export_trail", "--job", str(job.id), "--out", str(bundle), stdout=io.StringIO())
    roots = tmp_path / "tsa-root.pem"
    roots.write_bytes(tsa.authority.root_pem)
    pins = ["--key", signing_key().verifier, "--witness-key", witnessed.verifier]
    checked = offline_verify(bundle, *pins, "--tsa-cert", str(roots))
    assert checked.returncode == 0, checked.stdout
    assert "OK    timestamp: checkpoint.txt was timestamped at 20" in checked.stdout
    assert "OK    witness cosignatures: 1 pinned witness(es) cosigned" in checked.stdout
    # Another authority's root does not vouch for it.
    other_dir = tmp_path / "other-tsa"
    other_dir.mkdir()
    other = tmp_path / "other-root.pem"
    other.write_bytes(OpenSSLAuthority(other_dir).root_pem)
    assert offline_verify(bundle, *pins, "--tsa-cert", str(other)).returncode == 1
    # A witness the bundle's checkpoint does not carry fails the (default: all) quorum...
    _, absent = checkpoints.generate_signing_key(
        "witness.example/w2", alg=checkpoints.ALG_COSIGNATURE
    )
    both = [*pins, "--witness-key", absent]
    failed = offline_verify(bundle, *both)
    assert failed.returncode == 1 and "1 of the pinned witnesses cosigned; the quorum is 2" in (
        failed.stdout
    )
    # ...unless the examiner's quorum is one.
    assert offline_verify(bundle, *both, "--witness-quorum", "1").returncode == 0


def test_without_the_authoritys_root_a_timestamp_is_unverified_and_another_documents_fails(
    run_job, beat, tsa, settings, tmp_path
):
    """The examiner's probe: a genuine RFC 3161 response over another document, put in a bundle
    in place of checkpoint.tsr, passed without --tsa-cert. Its imprint is always checked."""
    from audit.evidence import timestamps
    from audit.evidence.bundle_format import deterministic_zip, manifest_member

    settings.PATHFINDER_TSA_URL = tsa.url
    job = run_job()
    beat()
    bundle = tmp_path / "bundle.zip"
    call_command("export_trail", "--job", str(job.id), "--out", str(bundle), stdout=io.StringIO())
    pins = ["--key", signing_key().verifier]
    checked = offline_verify(bundle, *pins)
    assert checked.returncode == 0, checked.stdout
    assert "SKIP  timestamp: UNVERIFIED: checkpoint.tsr is a granted RFC 3161 response over " \
        "checkpoint.txt" in checked.stdout  # fmt: skip

    foreign = timestamps.timestamp(tsa.url, b"another document", timeout=30)
    with zipfile.ZipFile(bundle) as archive:
        members = {i.filename: archive.read(i) for i in archive.infolist()}
    members["checkpoint.tsr"] = foreign
    body = [(n, d) for n, d in members.items() if n != "manifest.json"]
    forged = tmp_path / "forged.zip"
    forged.write_bytes(deterministic_zip([*body, ("manifest.json", manifest_member(body))]))
    refused = offline_verify(forged, *pins)
    assert refused.returncode == 1
    assert "checkpoint.tsr timestamps another document" in refused.stdout
    roots = tmp_path / "tsa-root.pem"
    roots.write_bytes(tsa.authority.root_pem)
    assert offline_verify(forged, *pins, "--tsa-cert", str(roots)).returncode == 1


def test_a_bundle_signed_by_another_key_fails_under_the_pinned_key(run_job, beat, tmp_path):
    job = run_job()
    beat()
    bundle = tmp_path / "bundle.zip"
    call_command("export_trail", "--job", str(job.id), "--out", str(bundle), stdout=io.StringIO())
    other = checkpoints.generate_signing_key("pathfinder.local/audit-log")[1]
    refused = offline_verify(bundle, "--key", other)
    assert refused.returncode == 1 and "none of the keys you pinned" in refused.stdout
    # Pinning the old and the new key of a rotated log accepts it.
    assert offline_verify(bundle, "--key", other, "--key", signing_key().verifier).returncode == 0


def test_a_web_host_without_the_signing_key_verifies_and_exports_but_never_signs(
    run_job, beat, settings, tmp_path
):
    job = run_job()
    beat()  # on the signing host
    verifier = signing_key().verifier
    settings.PATHFINDER_CHECKPOINT_KEY_FILE = tmp_path / "not-here.key"
    settings.PATHFINDER_CHECKPOINT_VERIFIER_KEY = [verifier]
    assert verify_everything().ok
    call_command(
        "export_trail", "--job", str(job.id), "--out", str(tmp_path / "b.zip"), stdout=io.StringIO()
    )
    run_job(prompt=(4,))
    with pytest.raises(SigningKeyMissing, match="not-here.key"):
        checkpoint_create()
    with pytest.raises(CommandError, match="no checkpoint signing key"):
        call_command("checkpoint", stdout=io.StringIO(), stderr=io.StringIO())
    assert not (tmp_path / "not-here.key").exists()  # never silently made


def test_a_rotated_log_key_keeps_old_checkpoints_verifiable(run_job, beat, settings, tmp_path):
    first = run_job()
    beat()
    old = signing_key().verifier
    settings.PATHFINDER_CHECKPOINT_KEY_FILE = tmp_path / "new.key"
    from audit.keys import signing_key_create

    new, _ = signing_key_create()
    settings.PATHFINDER_CHECKPOINT_VERIFIER_KEY = [new.verifier, old]
    # A trail covered only by the old key's checkpoint still exports, with that key in the
    # bundle (the one that signed its checkpoint).
    bundle = tmp_path / "old.zip"
    call_command("export_trail", "--job", str(first.id), "--out", str(bundle), stdout=io.StringIO())
    assert offline_verify(bundle, "--key", old).returncode == 0
    run_job(prompt=(4,))
    checkpoint_create()
    assert verify_everything().ok
    settings.PATHFINDER_CHECKPOINT_VERIFIER_KEY = [new.verifier]  # the old key forgotten
    assert "checkpoint" in failures_of(verify_everything())


def test_a_forged_cosignature_on_a_stored_checkpoint_is_named(run_job, witnessed):
    job = run_job()
    checkpoint = checkpoint_create()
    lines = checkpoint.note.splitlines()
    line = next(text for text in lines if text.startswith("\u2014 witness.example"))
    _, blob = line.removeprefix("\u2014 ").split(" ")
    raw = bytearray(base64.b64decode(blob))
    raw[-1] ^= 1  # the witness's signature, one bit off; the log's own signature untouched
    forged = checkpoint.note.replace(blob, base64.b64encode(bytes(raw)).decode())
    as_superuser("UPDATE audit_checkpoint SET note = %s WHERE id = %s", [forged, checkpoint.id])
    everything = verify_everything()
    assert "cosignature by witness.example/w1" in failures_of(everything)
    one = verify_trails([job.trail_id], scope="one")
    assert "cosignature by witness.example/w1" in failures_of(one)


def test_a_witness_that_answers_garbage_or_hostile_requests_harms_nothing(
    run_job, witnessed, settings
):
    import socket
    import threading

    # A "witness" that is not HTTP at all: the checkpoint is still signed.
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()

    def banner():
        connection_, _ = listener.accept()
        connection_.sendall(b"SSH-2.0-OpenSSH_9.2\r\n")
        connection_.close()

    threading.Thread(target=banner, daemon=True).start()
    bogus = f"{witnessed.verifier}@http://127.0.0.1:{listener.getsockname()[1]}"
    settings.PATHFINDER_WITNESSES = [bogus, witnessed.spec]
    run_job()
    checkpoint = checkpoint_create()
    assert witness_status(checkpoint).cosigned == 1  # the real one still cosigned
    listener.close()
    # Hostile requests to the real witness are refused, and it keeps serving.
    url = f"{witnessed.url}/add-checkpoint"
    negative = requests.post(url, data=b"x", headers={"Content-Length": "-1"}, timeout=5)
    assert negative.status_code == 400
    huge = requests.post(url, data=("old " + "9" * 5000 + "\n\n").encode(), timeout=5)
    assert huge.status_code == 400
    assert requests.post(url, data=b"\xff\xfe", timeout=5).status_code == 400


def test_the_same_checkpoint_with_other_cosignatures_is_no_fork(run_job, beat):
    from audit.publish import publish

    run_job()
    checkpoint = beat()
    witness_key, _ = checkpoints.generate_signing_key(
        "witness.example/w9", alg=checkpoints.ALG_COSIGNATURE
    )
    other = checkpoints.with_signature_lines(
        checkpoint.note, [checkpoints.cosign(checkpoint.note, witness_key, 1767225600)]
    )
    assert publish(1, other, None) == published_path(1)  # same body: not a conflict
    assert published_path(1).read_text() == checkpoint.note  # and not overwritten
    assert not list(published_path(1).parent.glob(".*"))  # no scratch file left behind

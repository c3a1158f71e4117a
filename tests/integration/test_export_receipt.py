"""`manage.py export_receipt` (ADR 0030): the RFC 9942 receipt of a real sealed trail, checked
with two COSE libraries that are not ours, scitt-cose (the whole receipt, from the leaf's bytes)
and pycose (COSE_Sign1 over a root folded by scitt-cose's Merkle code, not ours), proves the root
of the checkpoint the log published, and nothing for another trail's leaf."""

import base64
import hashlib
import io
import json
import zipfile

import pytest
import scitt_cose
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from django.core.management import CommandError, call_command
from pycose.keys import OKPKey
from pycose.keys.curves import Ed25519
from pycose.messages import Sign1Message
from scitt_cose import merkle as scitt_merkle

from audit.evidence import checkpoints, receipts
from audit.models import LedgerEntry
from reviewers.models import CustodyEvent


def public_key_of(verifier: str) -> bytes:
    """The raw Ed25519 key of a verifier key string, as docs/audit-format.md says to read it."""
    raw = base64.b64decode(verifier.split("+", 2)[2])
    assert raw[0] == 0x01 and len(raw) == 33
    return raw[1:]


def pem_of(verifier: str) -> bytes:
    key = Ed25519PublicKey.from_public_bytes(public_key_of(verifier))
    return key.public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo)


def pycose_root(receipt: bytes, leaf: bytes, verifier: str) -> bytes | None:
    """The root pycose verifies the receipt's signature over, folded by scitt-cose's merkle."""
    message = Sign1Message.decode(receipt)
    assert message.payload is None and message.phdr[395] == 1
    (proof,) = message.uhdr[396][-1]
    tree_size, leaf_index, path = receipts.cbor_decode(proof)
    root = scitt_merkle.root_from_inclusion_proof(
        leaf.hex(), leaf_index, tree_size, [p.hex() for p in path]
    )
    if root is None:
        return None
    message.key = OKPKey(crv=Ed25519, x=public_key_of(verifier))
    ok = message.verify_signature(detached_payload=bytes.fromhex(root))
    return bytes.fromhex(root) if ok else None


def export(job, path) -> str:
    out = io.StringIO()
    call_command("export_receipt", "--job", str(job.id), "--out", str(path), stdout=out)
    return out.getvalue()


def test_a_receipt_verifies_with_scitt_cose_and_pycose_and_proves_the_published_root(
    run_job, beat, signing_host, settings, tmp_path
):
    job = run_job(max_tokens=12)
    other = run_job(prompt=(9, 9))
    checkpoint = beat()
    path = tmp_path / "trail.receipt"
    said = export(job, path)
    receipt = path.read_bytes()

    published_dir = settings.PATHFINDER_CHECKPOINT_PUBLISH_DIR
    published = published_dir / f"checkpoint-{checkpoint.tree_size}.txt"
    signed = checkpoints.parse_and_verify(published.read_text(), signing_host.verifier)
    entry = LedgerEntry.objects.get(trail_id=job.trail_id)
    leaf = entry.payload.encode("utf-8")
    assert f"leaf index {entry.seq} of a tree of {signed.size}" in said and str(path) in said
    assert signing_host.verifier.split("+")[1] in said  # the kid is the pinned key's id

    checked = scitt_cose.verify_receipt(
        receipt, leaf_entry_hex=leaf.hex(), log_public_key_pem=pem_of(signing_host.verifier)
    )
    assert checked.ok, checked.errors
    assert bytes.fromhex(checked.root) == signed.root
    assert (checked.tree_size, checked.leaf_index) == (signed.size, entry.seq)
    # One signature of the root serves every leaf: the receipt names the log, not the trail
    # (the leaf it is checked with does).
    assert (checked.issuer, checked.subject) == (signed.origin, None)
    assert pycose_root(receipt, leaf, signing_host.verifier) == signed.root

    kid, public = receipts.key_for_verifier(signing_host.verifier)
    assert receipts.decode_receipt(receipt).kid == kid
    assert receipts.receipt_problems(
        receipt, leaf=leaf, public_key=public, root=signed.root, tree_size=signed.size,
        leaf_index=entry.seq, kid=kid, issuer=signed.origin,
    ) == []  # fmt: skip

    # Another trail's leaf (in the same tree) is not proven by this receipt, by either library.
    other_leaf = LedgerEntry.objects.get(trail_id=other.trail_id).payload.encode("utf-8")
    assert not scitt_cose.verify_receipt(
        receipt, leaf_entry_hex=other_leaf.hex(), log_public_key_pem=pem_of(signing_host.verifier)
    ).ok
    assert pycose_root(receipt, other_leaf, signing_host.verifier) is None
    assert receipts.receipt_problems(receipt, leaf=other_leaf, public_key=public)
    # Nor is it valid under another log's key.
    stranger = checkpoints.generate_signing_key("someone-else")[1]
    assert not scitt_cose.verify_receipt(
        receipt, leaf_entry_hex=leaf.hex(), log_public_key_pem=pem_of(stranger)
    ).ok
    assert pycose_root(receipt, leaf, stranger) is None

    # The same trail and checkpoint give the same bytes.
    export(job, tmp_path / "again.receipt")
    assert (tmp_path / "again.receipt").read_bytes() == receipt


def test_a_host_without_the_log_key_gives_receipts_out(
    run_job, beat, signing_host, settings, tmp_path
):
    """The checkpoint keeps its root's signature, so the web and the workers, which never hold
    the signing key (they pin its verifier key), give a trail's receipt out as the signing host
    would."""
    job = run_job()
    beat()
    export(job, tmp_path / "signer.receipt")
    settings.PATHFINDER_CHECKPOINT_KEY_FILE = tmp_path / "no-such.key"
    settings.PATHFINDER_CHECKPOINT_VERIFIER_KEY = [signing_host.verifier]
    export(job, tmp_path / "web.receipt")
    assert (tmp_path / "web.receipt").read_bytes() == (tmp_path / "signer.receipt").read_bytes()


def test_bundles_carry_the_receipt_checked_with_their_leaf_and_key(run_job, beat, tmp_path):
    """What the command tells an examiner: the leaf is ledger-leaf.json's payload, the key the
    bundle's (and verifier_key's) verifier key. Bundles carry the receipt themselves (bundle
    format 6): a one-trail bundle's receipt.cose is export_receipt's bytes, and each trail of a
    matter bundle has its own, each checked by scitt-cose with its own leaf."""
    job, second = run_job(), run_job(prompt=(7, 7, 7))
    beat()
    export(job, tmp_path / "r.cbor")
    call_command("export_trail", "--job", str(job.id), "--out", str(tmp_path / "b.zip"))
    with zipfile.ZipFile(tmp_path / "b.zip") as bundle:
        leaf = json.loads(bundle.read("ledger-leaf.json"))["payload"].encode("utf-8")
        verifier = bundle.read("verifier-key.txt").decode().split()[0]
        carried = bundle.read("receipt.cose")
    assert carried == (tmp_path / "r.cbor").read_bytes()
    checked = scitt_cose.verify_receipt(
        carried, leaf_entry_hex=leaf.hex(), log_public_key_pem=pem_of(verifier)
    )
    assert checked.ok, checked.errors

    call_command("export_matter", "--matter", job.matter.name, "--out", str(tmp_path / "m.zip"))
    with zipfile.ZipFile(tmp_path / "m.zip") as bundle:
        listed = json.loads(bundle.read("matter.json"))["trails"]
        carried = {
            t["trail_id"]: (
                bundle.read(f"trails/{t['trail_id']}/receipt.cose"),
                json.loads(bundle.read(f"trails/{t['trail_id']}/ledger-leaf.json"))["payload"],
            )
            for t in listed
        }
    assert {str(job.trail_id), str(second.trail_id)} <= set(carried)
    for receipt, payload in carried.values():
        checked = scitt_cose.verify_receipt(
            receipt, leaf_entry_hex=payload.encode().hex(), log_public_key_pem=pem_of(verifier)
        )
        assert checked.ok, checked.errors
    (first, _), (_, second_leaf) = list(carried.values())[:2]
    assert not scitt_cose.verify_receipt(  # one trail's receipt proves no other trail's leaf
        first, leaf_entry_hex=second_leaf.encode().hex(), log_public_key_pem=pem_of(verifier)
    ).ok


def test_a_trail_of_the_only_leaf_has_a_receipt_with_an_empty_path(run_job, beat, tmp_path):
    job = run_job()
    assert beat().tree_size == 1
    export(job, tmp_path / "one.receipt")
    stated = receipts.decode_receipt((tmp_path / "one.receipt").read_bytes())
    assert (stated.tree_size, stated.leaf_index, stated.path) == (1, 0, ())


def test_what_cannot_be_proven_yet_is_refused_naming_the_job(run_job, beat, tmp_path, owner):
    job = run_job()
    path = tmp_path / "r.cbor"
    with pytest.raises(CommandError, match="^job: .*sealed after the newest signed checkpoint"):
        export(job, path)
    assert not path.exists()
    with pytest.raises(CommandError, match="^job: .* has no audit trail"):
        call_command("export_receipt", "--job", "0" * 32, "--out", str(path))
    with pytest.raises(CommandError, match="^job: 'nope' is not a job id"):
        call_command("export_receipt", "--job", "nope", "--out", str(path))
    beat()
    with pytest.raises(CommandError, match="^out: the directory"):
        call_command("export_receipt", "--job", str(job.id), "--out", str(tmp_path / "no" / "r"))


def test_an_open_trail_has_no_receipt(owner, tmp_path):
    from audit.store import trail_open
    from decoding.models import GenerationJob

    job_id = GenerationJob().id
    trail_open(job_id=job_id, attempt=1)
    with pytest.raises(CommandError, match="^job: .* is still open"):
        call_command("export_receipt", "--job", str(job_id), "--out", str(tmp_path / "r"))


def test_a_reviewer_downloads_the_receipt_from_the_portal_and_the_custody_log_names_it(
    run_job, beat, signing_host, reviewer, other_reviewer
):
    job = run_job()
    url = f"/portal/jobs/{job.id}/receipt"
    assert reviewer.post(url).status_code == 302  # no checkpoint covers it yet: refused
    assert not CustodyEvent.objects.filter(action="export").exists()
    beat()
    assert other_reviewer.post(url).status_code == 404  # another matter's reviewer
    response = reviewer.post(url)
    assert response.status_code == 200 and response["Content-Type"] == "application/cose"
    receipt = response.content
    leaf = LedgerEntry.objects.get(trail_id=job.trail_id).payload.encode("utf-8")
    checked = scitt_cose.verify_receipt(
        receipt, leaf_entry_hex=leaf.hex(), log_public_key_pem=pem_of(signing_host.verifier)
    )
    assert checked.ok, checked.errors
    event = CustodyEvent.objects.get(action="export")
    assert json.loads(event.detail)["sha256"] == hashlib.sha256(receipt).hexdigest()

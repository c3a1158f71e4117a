"""Audit format 2 is a contract with outside verifiers: tests/data/audit_golden_vectors_v2.json
and tests/data/sample-bundle.zip are committed data. The code must reproduce them byte for byte,
and each value is re-derived here from docs/audit-format.md's formulas with nothing but
hashlib, hmac, base64, zipfile and `cryptography`, never with audit's own functions."""

import base64
import hashlib
import hmac
import io
import json
import zipfile
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from audit.evidence import offline_verify
from tests.data import make_golden_vectors_v2

DATA = Path(__file__).parents[1] / "data"
VECTORS = json.loads((DATA / "audit_golden_vectors_v2.json").read_text("utf-8"))
SAMPLE = (DATA / "sample-bundle.zip").read_bytes()


def sha256_hex(*parts: bytes) -> str:
    return hashlib.sha256(b"\x00".join(parts)).hexdigest()


def test_the_code_reproduces_the_committed_vectors_and_sample_bundle_byte_for_byte():
    vectors, zip_bytes = make_golden_vectors_v2.build()
    assert vectors == VECTORS
    assert zip_bytes == SAMPLE


def test_the_record_chain_follows_the_documented_formulas():
    trail = VECTORS["trail_id"]
    prev = sha256_hex(b"PF-GENESIS-v1", trail.encode())
    assert prev == VECTORS["genesis_hash"]
    kinds = []
    for record in VECTORS["records"]:
        assert record["prev_hash"] == prev
        expected = sha256_hex(
            b"PF-RECORD-v1",
            trail.encode(),
            str(record["seq"]).encode(),
            prev.encode(),
            record["payload"].encode(),
        )
        assert record["record_hash"] == expected
        prev = expected
        payload = json.loads(record["payload"])
        canonical = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        assert canonical == record["payload"]
        kinds.append(payload["kind"])
    assert kinds == ["request", "decision", "decision", "answer"]
    steps = [json.loads(r["payload"]).get("step") for r in VECTORS["records"]]
    assert steps == [None, 0, 1, None]  # step s at seq s + 1


def test_the_texts_are_bound_by_documented_salted_digests():
    salt = bytes.fromhex(VECTORS["trail_salt"])
    request = json.loads(VECTORS["records"][0]["payload"])
    answer = json.loads(VECTORS["records"][-1]["payload"])
    bound = {**request["prompt"]["digests"], "answer.text": answer["output_text_digest"]}
    for name, value in VECTORS["texts"].items():
        field_salt = hmac.new(salt, name.encode("ascii"), hashlib.sha256).digest()
        assert field_salt.hex() == value["field_salt"]
        digest = hashlib.sha256(
            b"PF-TEXT-v2" + b"\x00" + field_salt + b"\x00" + value["text"].encode("utf-8")
        ).hexdigest()
        assert digest == value["digest"] == bound[name]
    decisions = [json.loads(r["payload"]) for r in VECTORS["records"][1:-1]]
    assert answer["output_token_ids"] == [t for d in decisions for t in d["emitted"]]


def _mth(hashes: list[bytes]) -> bytes:
    if not hashes:
        return hashlib.sha256(b"").digest()
    if len(hashes) == 1:
        return hashes[0]
    k = 1
    while k * 2 < len(hashes):
        k *= 2
    return hashlib.sha256(b"\x01" + _mth(hashes[:k]) + _mth(hashes[k:])).digest()


def test_merkle_leaves_roots_and_proofs_follow_rfc_6962():
    merkle = VECTORS["merkle"]
    hashes = [hashlib.sha256(b"\x00" + leaf.encode()).digest() for leaf in merkle["leaves"]]
    assert [h.hex() for h in hashes] == merkle["leaf_hashes"]
    for size, root in merkle["roots"].items():
        assert _mth(hashes[: int(size)]).hex() == root
    # The inclusion proof, leaf to root (RFC 9162 2.1.3.2), by hand for index 2 of 5.
    proof = [bytes.fromhex(p) for p in merkle["inclusion"]["proof"]]
    assert proof == [hashes[3], _mth(hashes[:2]), hashes[4]]
    node = hashlib.sha256(b"\x01" + hashes[2] + proof[0]).digest()
    node = hashlib.sha256(b"\x01" + proof[1] + node).digest()
    node = hashlib.sha256(b"\x01" + node + proof[2]).digest()
    assert node.hex() == merkle["roots"]["5"]
    # Consistency 4 -> 5: the new leaf is the only node needed after the old root.
    four = next(c for c in merkle["consistency"] if c["old_size"] == 4)
    assert four["proof"] == [hashes[4].hex()]


def test_keys_checkpoint_and_cosignature_follow_c2sp():
    keys, checkpoint = VECTORS["keys"], VECTORS["checkpoint"]
    name, key_id, encoded = keys["log_verifier"].split("+", 2)
    raw = base64.b64decode(encoded)
    assert raw[0] == 0x01
    assert hashlib.sha256(name.encode() + b"\n\x01" + raw[1:]).digest()[:4].hex() == key_id
    body = checkpoint["body"]
    root = base64.b64encode(bytes.fromhex(VECTORS["merkle"]["roots"]["5"])).decode()
    assert body == f"{name}\n5\n{root}\n"
    line = checkpoint["signed_note"].split("\n\n", 1)[1]
    signer, blob = line.removeprefix("\u2014 ").rstrip("\n").split(" ")
    blob = base64.b64decode(blob)
    assert signer == name and blob[:4].hex() == key_id
    Ed25519PublicKey.from_public_bytes(raw[1:]).verify(blob[4:], body.encode())
    # The witness's cosignature: key id over type 0x04, a timestamp, then the signature.
    w_name, w_id, w_encoded = keys["witness_verifier"].split("+", 2)
    w_raw = base64.b64decode(w_encoded)
    assert w_raw[0] == 0x04
    assert hashlib.sha256(w_name.encode() + b"\n\x04" + w_raw[1:]).digest()[:4].hex() == w_id
    cosigner, cosig = checkpoint["cosignature_line"].removeprefix("\u2014 ").rstrip("\n").split(" ")
    cosig = base64.b64decode(cosig)
    assert cosigner == w_name and cosig[:4].hex() == w_id and len(cosig) == 76
    timestamp = int.from_bytes(cosig[4:12], "big")
    assert timestamp == checkpoint["cosignature_time"]
    message = f"cosignature/v1\ntime {timestamp}\n{body}".encode()
    Ed25519PublicKey.from_public_bytes(w_raw[1:]).verify(cosig[12:], message)
    assert checkpoint["cosigned_note"] == checkpoint["signed_note"] + checkpoint["cosignature_line"]


def test_the_sample_bundle_is_rebuilt_byte_for_byte_from_its_members_by_zipfile():
    with zipfile.ZipFile(io.BytesIO(SAMPLE)) as archive:
        members = [(info.filename, archive.read(info)) for info in archive.infolist()]
    rebuilt = io.BytesIO()
    with zipfile.ZipFile(rebuilt, "w") as archive:
        for name, data in members:
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type, info.create_system = zipfile.ZIP_STORED, 3
            info.external_attr = 0o644 << 16
            archive.writestr(info, data)
    assert rebuilt.getvalue() == SAMPLE
    names = [name for name, _ in members]
    manifest = json.loads(dict(members)["manifest.json"])
    assert list(manifest) == ["files", "format_version"]  # canonical order: files first
    assert manifest["files"] == {n: hashlib.sha256(d).hexdigest() for n, d in members[:-1]}
    assert (
        names[-1] == "manifest.json"
        and dict(members)["manifest.json"].decode() == (VECTORS["bundle"]["manifest"])
    )
    assert hashlib.sha256(SAMPLE).hexdigest() == VECTORS["bundle"]["sha256"]


def test_the_sample_bundle_verifies_under_the_golden_keys():
    keys = VECTORS["keys"]
    findings = offline_verify.inspect_bundle(
        SAMPLE, keys=[keys["log_verifier"]], witness_keys=[keys["witness_verifier"]]
    )
    assert findings.failures == 0, [c.failures for c in findings.checks]
    assert findings.question == VECTORS["texts"]["prompt.rendered"]["text"]
    assert findings.answer == VECTORS["texts"]["answer.text"]["text"]

"""Export bundles end to end: audit.bundle writes, audit.offline_verify checks, nothing else."""

from __future__ import annotations

import ast
import hashlib
import io
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from audit import bundle, chain, checkpoints, merkle, offline_verify
from audit.offline_verify import MEMBER_NAMES, check_bundle, verify_bundle

ROOT = Path(__file__).resolve().parents[3]
TRAIL = "3f2a6c1e-5b7d-4c1a-9e2f-0123456789ab"
JOB = "9d0c1b2a-3e4f-4a5b-8c6d-7e8f90a1b2c3"
ORIGIN = "pathfinder.example/ledger"
LEAF_INDEX = 4
MODEL = {"name": "stub", "revision": "1", "runtime": "pathfinder-stub", "runtime_version": "1"}
PARAMS = {
    "max_tokens": 8,
    "temperature": "0.7",
    "top_k": 0,
    "top_p": "1.0",
    "seed": 7,
    "draft_length": 2,
    "eos_token_id": None,
}


def decision_payload(step: int) -> str:
    return chain.canonical_json(
        {
            "v": 1,
            "request_id": JOB,
            "step": step,
            "rule": "speculative-sampling",
            "draft": {**MODEL, "sha256": "a" * 64},
            "target": {**MODEL, "sha256": "b" * 64},
            "params": PARAMS,
            "context_length": 5 + 2 * step,
            "draft_length": 2,
            "drafted": [
                {
                    "token": 11 + step,
                    "text": "é",
                    "q": "0.5",
                    "p": "0.25",
                    "ratio": "0.5",
                    "u": "0.125",
                    "accepted": True,
                },
                {
                    "token": 12,
                    "text": "b",
                    "q": "0.5",
                    "p": "0.1",
                    "ratio": "0.2",
                    "u": "0.9",
                    "accepted": False,
                },
            ],
            "accepted_count": 1,
            "correction": {"token": 3, "text": "c", "kind": "residual", "u": "0.3", "p": "0.2"},
            "emitted": [11 + step, 3],
            "emitted_text": ["é", "c"],
            "stop": None,
            "rationale": "Accepted the first drafted token; resampled the second.",
            "timings_us": {"draft": 10, "verify": 20},
        }
    )


def make_trail(trail_id: str, count: int) -> list[tuple[int, str, str, str]]:
    records, prev = [], chain.genesis_hash(trail_id)
    for seq in range(count):
        payload = decision_payload(seq)
        digest = chain.record_hash(trail_id, seq, prev, payload)
        records.append((seq, prev, digest, payload))
        prev = digest
    return records


def leaf_for(trail_id: str, records) -> str:
    head = records[-1][2] if records else chain.genesis_hash(trail_id)
    return chain.ledger_payload(
        trail_id=trail_id,
        job_id=JOB,
        record_count=len(records),
        head_hash=head,
        outcome="succeeded",
    )


def other_leaf(i: int) -> str:
    trail = f"00000000-0000-4000-8000-{i:012d}"
    return chain.ledger_payload(
        trail_id=trail,
        job_id=JOB,
        record_count=i,
        head_hash=hashlib.sha256(bytes([i])).hexdigest(),
        outcome="failed" if i % 2 else "succeeded",
    )


@pytest.fixture(scope="module")
def key():
    return checkpoints.generate_signing_key(ORIGIN)


def build(key, *, records=None, sealed=None, checkpoint_size=None, leaf_payload=None, **over):
    """A realistic bundle: a 3-record trail sealed as entry 4 of a 7-entry ledger.

    `sealed` are the records the log sealed (default: `records`); `leaf_payload` overrides the
    bundle's ledger leaf (default: the log's entry)."""
    private, verifier = key
    records = make_trail(TRAIL, 3) if records is None else records
    payloads = [other_leaf(i) for i in range(7)]
    payloads[LEAF_INDEX] = leaf_for(TRAIL, records if sealed is None else sealed)
    leaves = [p.encode() for p in payloads]
    size = len(leaves) if checkpoint_size is None else checkpoint_size
    note = checkpoints.sign_checkpoint(ORIGIN, size, merkle.root(leaves[:size]), private)
    fields = dict(
        records=records,
        trail_id=TRAIL,
        ledger_index=LEAF_INDEX,
        ledger_payload=payloads[LEAF_INDEX] if leaf_payload is None else leaf_payload,
        proof=merkle.inclusion_proof(LEAF_INDEX, leaves),
        tree_size=len(leaves),
        checkpoint_note=note,
        verifier_key=verifier,
        models={"draft": {**MODEL, "sha256": "a" * 64}, "target": {**MODEL, "sha256": "b" * 64}},
        params=PARAMS,
        verification_text="Verified by Pathfinder: 3 records, 0 failures.\n",
        readme_text="Evidence bundle for one generation.\n\nCertified by: ________\n",
    )
    fields.update(over)
    return bundle.bundle_bytes(**fields)


def failed_checks(data: bytes, key: str | None = None) -> set[str]:
    return {c.name for c in check_bundle(data, key=key) if not c.ok}


def test_a_good_bundle_verifies(key, tmp_path, capsys):
    data = build(key)
    path = tmp_path / "bundle.zip"
    digest = bundle.write_bundle(path, **_fields_of(key))
    assert path.read_bytes() == data and digest == hashlib.sha256(data).hexdigest()
    assert verify_bundle(path) == []
    assert verify_bundle(data, key=key[1]) == []
    names = [c.name for c in check_bundle(data, key=key[1])]
    assert names == [
        "zip container",
        "members",
        "manifest",
        "records and chain",
        "ledger leaf",
        "leaf hash",
        "inclusion proof",
        "checkpoint signature",
        "pinned key",
        "descriptive files",
    ]
    assert offline_verify.main([str(path)]) == 0
    out = capsys.readouterr().out
    assert "FAIL" not in out and "RESULT: VERIFIED" in out and "No --key given" in out
    assert offline_verify.main([str(path), "--key", key[1]]) == 0
    assert "No --key given" not in capsys.readouterr().out


def _fields_of(key):
    """write_bundle's arguments for build(key), recovered from the bundle it makes."""
    data = build(key)
    members = dict(_members(data))
    import json

    chain_doc = json.loads(members["chain.json"])
    leaf = json.loads(members["ledger-leaf.json"])
    proof = json.loads(members["inclusion-proof.json"])
    records_text = members["records.jsonl"].decode().split("\n")[:-1]
    return dict(
        records=[
            (r["seq"], r["prev_hash"], r["record_hash"], p)
            for r, p in zip(chain_doc["records"], records_text, strict=True)
        ],
        trail_id=chain_doc["trail_id"],
        ledger_index=leaf["index"],
        ledger_payload=leaf["payload"],
        proof=[bytes.fromhex(p) for p in proof["proof"]],
        tree_size=proof["tree_size"],
        checkpoint_note=members["checkpoint.txt"].decode(),
        verifier_key=members["verifier-key.txt"].decode().strip(),
        models=json.loads(members["models.json"]),
        params=json.loads(members["params.json"]),
        verification_text=members["verification.txt"].decode(),
        readme_text=members["README.txt"].decode(),
    )


def _members(data: bytes) -> list[tuple[str, bytes]]:
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        return [(i.filename, archive.read(i)) for i in archive.infolist()]


def test_the_zip_is_deterministic_and_has_the_specified_settings(key):
    data = build(key)
    assert build(key) == data
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        infos = archive.infolist()
        assert archive.comment == b""
    assert [i.filename for i in infos] == list(MEMBER_NAMES)
    for info in infos:
        assert info.date_time == (1980, 1, 1, 0, 0, 0)
        assert info.compress_type == zipfile.ZIP_STORED
        assert info.external_attr == 0o644 << 16
        assert info.create_system == 3
    # Python's own zipfile, given the same settings, writes the same bytes.
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        for name, payload in _members(data):
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type, info.create_system = zipfile.ZIP_STORED, 3
            info.external_attr = 0o644 << 16
            archive.writestr(info, payload)
    assert out.getvalue() == data


def test_the_members_hold_what_the_format_says(key):
    import json

    members = dict(_members(build(key)))
    records = make_trail(TRAIL, 3)
    assert members["records.jsonl"] == "".join(p + "\n" for *_, p in records).encode()
    chain_doc = json.loads(members["chain.json"])
    assert chain_doc["genesis_hash"] == chain.genesis_hash(TRAIL)
    assert chain_doc["head_hash"] == records[-1][2] and chain_doc["record_count"] == 3
    manifest = members["manifest.json"]
    assert manifest == chain.canonical_json(json.loads(manifest)).encode()
    files = json.loads(manifest)["files"]
    assert list(files) == sorted(MEMBER_NAMES[:-1])
    assert all(files[n] == hashlib.sha256(members[n]).hexdigest() for n in files)
    proof = json.loads(members["inclusion-proof.json"])
    assert proof["leaf_index"] == LEAF_INDEX and proof["tree_size"] == 7
    cp = checkpoints.parse_and_verify(members["checkpoint.txt"].decode(), key[1])
    assert cp.size == 7 and members["verifier-key.txt"] == (key[1] + "\n").encode()


def test_every_single_byte_flip_of_the_zip_fails(key):
    data = build(key)
    assert verify_bundle(data) == []
    started = time.perf_counter()
    survivors = []
    for i in range(len(data)):
        bad = bytearray(data)
        bad[i] ^= 0x01
        if not verify_bundle(bytes(bad)):
            survivors.append(i)
    elapsed = time.perf_counter() - started
    assert survivors == [], f"byte flips at {survivors[:20]} went unnoticed"
    print(f"{len(data)} byte flips verified in {elapsed:.2f}s")


def test_bytes_set_to_0xff_or_0x00_fail_too(key):
    """Other changes than a low-bit flip, on every 7th byte of a one-record bundle (for time)."""
    data = build(key, records=make_trail(TRAIL, 1))
    for i in range(0, len(data), 7):
        for value in (0x00, 0xFF):
            if data[i] == value:
                continue
            bad = bytearray(data)
            bad[i] = value
            assert verify_bundle(bytes(bad)), f"byte {i} set to {value:#x} went unnoticed"


def test_truncated_or_extended_zips_fail(key):
    data = build(key)
    for cut in (1, 22, len(data) // 2, len(data) - 1):
        assert verify_bundle(data[:cut])
    assert verify_bundle(data + b"\x00")
    assert verify_bundle(b"PK\x03\x04junk" + data)
    assert verify_bundle(b"")


def test_a_wrong_pinned_key_fails(key, tmp_path, capsys):
    data = build(key)
    _, other = checkpoints.generate_signing_key(ORIGIN)
    failures = verify_bundle(data, key=other)
    assert any("not the key you pinned" in f for f in failures)
    assert any("no signature by the key" in f for f in failures)
    assert failed_checks(data, key=other) == {"pinned key"}
    path = tmp_path / "b.zip"
    path.write_bytes(data)
    assert offline_verify.main([str(path), "--key", other]) == 1
    assert "RESULT: FAILED" in capsys.readouterr().out
    assert verify_bundle(data, key="not a key")


def test_a_bundle_signed_and_keyed_by_someone_else_passes_only_unpinned(key):
    impostor = checkpoints.generate_signing_key(ORIGIN)
    data = build(impostor)
    assert verify_bundle(data) == []  # internally consistent...
    assert failed_checks(data, key=key[1]) == {"pinned key"}  # ...but not the log's key


def test_a_checkpoint_for_a_tree_without_the_leaf_fails(key):
    # The checkpoint predates the leaf: the tree of its first 4 entries.
    data = build(key, checkpoint_size=LEAF_INDEX)
    assert failed_checks(data) == {"inclusion proof"}
    # Same size, but a tree where entry 4 is another trail's (proof from the bundle's tree).
    records = make_trail(TRAIL, 3)
    honest = [other_leaf(i) for i in range(7)]
    honest[LEAF_INDEX] = leaf_for(TRAIL, records)
    private, verifier = key
    rival = [other_leaf(i + 10) for i in range(7)]
    note = checkpoints.sign_checkpoint(ORIGIN, 7, merkle.root([p.encode() for p in rival]), private)
    data = build(key, checkpoint_note=note)
    assert failed_checks(data) == {"inclusion proof"}
    assert any("does not lead to the checkpoint's root" in f for f in verify_bundle(data))


def test_consistent_repacking_does_not_hide_an_edited_record(key):
    """An editor who rewrites CRCs, hashes and the manifest is still caught by the signed leaf."""
    records = make_trail(TRAIL, 3)
    seq, prev, _, payload = records[1]
    edited = payload.replace('"rule":"speculative-sampling"', '"rule":"greedy-argmax"')
    # 1. Edited payload, hashes left alone: the chain breaks.
    tampered = [records[0], (seq, prev, records[1][2], edited), records[2]]
    assert failed_checks(build(key, records=tampered, sealed=records)) == {"records and chain"}
    # 2. The chain re-hashed from there on: the ledger leaf no longer matches the head.
    rehashed, prev_hash = list(records[:1]), records[0][2]
    for s, p in [(1, edited), (2, records[2][3])]:
        digest = chain.record_hash(TRAIL, s, prev_hash, p)
        rehashed.append((s, prev_hash, digest, p))
        prev_hash = digest
    assert failed_checks(build(key, records=rehashed, sealed=records)) == {"ledger leaf"}
    # 3. The leaf rewritten to match too: now the leaf is not in the signed tree.
    data = build(key, records=rehashed, sealed=records, leaf_payload=leaf_for(TRAIL, rehashed))
    assert failed_checks(data) == {"inclusion proof"}
    # 4. A record dropped from the end, everything else consistent with the shorter trail.
    shorter = records[:2]
    data = build(key, records=shorter, sealed=records, leaf_payload=leaf_for(TRAIL, shorter))
    assert failed_checks(data) == {"inclusion proof"}


def test_a_non_canonical_payload_is_caught_even_when_its_hashes_match(key):
    payload = decision_payload(0).replace('"v":1', '"v": 1')
    genesis = chain.genesis_hash(TRAIL)
    records = [(0, genesis, chain.record_hash(TRAIL, 0, genesis, payload), payload)]
    data = build(key, records=records)
    assert failed_checks(data) == {"records and chain"}
    assert any("canonical" in f for f in verify_bundle(data))


def test_members_missing_extra_or_reordered_are_reported_with_a_valid_manifest(key):
    members = _members(build(key))
    body = members[:-1]

    def repack(parts):
        manifest = offline_verify.manifest_member([p for p in parts if p[0] != "manifest.json"])
        return offline_verify.deterministic_zip([*parts, ("manifest.json", manifest)])

    extra = repack([*body, ("notes.txt", b"hello")])
    assert any("unexpected: 'notes.txt'" in f for f in verify_bundle(extra))
    missing = repack([m for m in body if m[0] != "params.json"])
    assert any("missing: params.json" in f for f in verify_bundle(missing))
    swapped = repack([body[1], body[0], *body[2:]])
    assert failed_checks(swapped) == {"members"}


def test_an_empty_trail_bundle_verifies(key):
    data = build(key, records=[])
    assert verify_bundle(data) == []


def test_the_cli_runs_as_a_module(key, tmp_path):
    path = tmp_path / "bundle.zip"
    path.write_bytes(build(key))
    run = subprocess.run(
        [sys.executable, "-m", "audit.offline_verify", str(path), "--key", key[1]],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.count("\nOK ") == 10
    path.write_bytes(build(key)[:-1])
    run = subprocess.run(
        [sys.executable, "-m", "audit.offline_verify", str(path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 1 and "FAIL  zip container" in run.stdout


def test_the_verifier_never_imports_django():
    code = (
        "import sys, audit.offline_verify, audit.bundle; "
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
        "('django', 'rest_framework', 'numpy', 'celery')); "
        "assert not bad, bad"
    )
    run = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr


@pytest.mark.parametrize(
    ("module", "allowed"),
    [
        ("merkle", set()),
        ("checkpoints", {"cryptography"}),
        ("offline_verify", {"cryptography", "audit"}),
        ("bundle", {"audit"}),
    ],
)
def test_the_evidence_modules_import_only_what_they_may(module, allowed):
    tree = ast.parse((ROOT / "audit" / f"{module}.py").read_text())
    audit_ok = {"audit.chain", "audit.merkle", "audit.checkpoints"}
    if module == "bundle":
        audit_ok.add("audit.offline_verify")
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            names = [f"{base}.{a.name}" if base == "audit" else base for a in node.names]
        else:
            continue
        for name in names:
            top = name.split(".")[0]
            if top == "__future__" or top in sys.stdlib_module_names:
                continue
            assert top in allowed, f"{module} imports {name}"
            if top == "audit":
                assert name in audit_ok, f"{module} imports {name}"

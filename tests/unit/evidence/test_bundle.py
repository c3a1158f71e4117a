"""Export bundles end to end: audit.evidence.bundle writes, audit.evidence.offline_verify checks,
nothing else."""

from __future__ import annotations

import ast
import hashlib
import io
import json
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from audit.evidence import (
    binding,
    bundle,
    bundle_format,
    chain,
    checkpoints,
    merkle,
    offline_verify,
    sealing,
)
from audit.evidence.offline_verify import MEMBER_NAMES, check_bundle, verify_bundle
from decoding.engine.rng import uniform
from decoding.engine.sampling import decimal
from tests.tsa import OpenSSLAuthority

ROOT = Path(__file__).resolve().parents[3]
TRAIL = "3f2a6c1e-5b7d-4c1a-9e2f-0123456789ab"
JOB = "9d0c1b2a-3e4f-4a5b-8c6d-7e8f90a1b2c3"
ORIGIN = "pathfinder.example/ledger"
LEAF_INDEX = 4
MODEL = {"name": "stub", "revision": "1", "runtime": "pathfinder-stub", "runtime_version": "1"}
PARAMS = {
    "max_tokens": 4,
    "temperature": "0.7",
    "top_k": 0,
    "top_p": "1.0",
    "seed": 7,
    "draft_length": 2,
    "eos_token_id": None,
}


SALT = "5a" * 32  # the trail's salt (fixed, so the bundle is a fixed byte string)
QUESTION = binding.Question(
    given_kind="prompt",
    given="Quote clause 7 of the lease: ",
    rendered="Quote clause 7 of the lease: ",
    token_ids=(4, 5, 6, 7, 8),
    params={**PARAMS, "stop": ["\n\n"], "stream": False},
)
ANSWER_TEXT = "éc ésc"


def request_payload() -> str:
    return chain.canonical_json(
        binding.request_payload(
            trail_salt=SALT,
            job_id=JOB,
            matter="Doe v. Roe",
            request_id="client-42",
            attempt=1,
            previous_trail=None,
            model_spec="stub",
            models={
                "draft": {**MODEL, "sha256": "a" * 64},
                "target": {**MODEL, "sha256": "b" * 64},
            },
            question=QUESTION,
            format_version=3,
        )
    )


def decision_payload(step: int) -> str:
    """Step `step`'s decision as format 3 records it: its tokens sealed (clear_decision)."""
    return chain.canonical_json(sealing.seal_decision(clear_decision(step), SALT)[0])


def slot_values() -> dict:
    """Every token slot of the trail's two decisions, by slot name: what the service keeps."""
    return {
        **sealing.seal_decision(clear_decision(0), SALT)[1],
        **sealing.seal_decision(clear_decision(1), SALT)[1],
    }


def clear_decision(step: int) -> dict:
    """An honest sampled decision: its draws are the engine's RNG's, its accept tests hold.
    Step 0 accepts token 11 and rejects 12 (resampling 3); step 1 accepts 12 and adds bonus 3."""
    first = step == 0
    drafted = [
        {"token": 11 if first else 12, "text": "é", "q": "0.5", "p": "0.5", "ratio": "1.0",
         "u": decimal(uniform(7, step, 0, "accept")), "accepted": True},
    ]  # fmt: skip
    if first:
        drafted.append(
            {
                "token": 12,
                "text": "b",
                "q": "0.5",
                "p": "1e-05",
                "ratio": "2e-05",
                "u": decimal(uniform(7, step, 1, "accept")),
                "accepted": False,
            }  # fmt: skip
        )
    kind = "residual" if first else "bonus"
    return {
        "v": 3,
        "kind": "decision",
        "request_id": JOB,
        "step": step,
        "rule": "speculative-sampling",
        "draft": {**MODEL, "sha256": "a" * 64},
        "target": {**MODEL, "sha256": "b" * 64},
        "params": PARAMS,
        "context_length": 5 + 2 * step,
        "draft_length": len(drafted),
        "drafted": drafted,
        "accepted_count": 1,
        "correction": {
            "token": 3,
            "text": "c",
            "kind": kind,
            "u": decimal(uniform(7, step, 1, kind)),
            "p": "0.2",
        },
        "emitted": [drafted[0]["token"], 3],
        "emitted_text": ["é", "c"],
        "stop": "max_tokens" if step == 1 else None,
        "rationale": "Accepted the first drafted token; resampled the second.",
        "timings_us": {"draft": 10, "verify": 20},
    }


ANSWER_IDS = (11, 3, 12, 3)


def answer_payload(text: str = ANSWER_TEXT) -> str:
    answer = binding.Answer(token_ids=ANSWER_IDS, text=text, stop_reason="max_tokens")
    return chain.canonical_json(
        binding.answer_payload(trail_salt=SALT, answer=answer, steps=2, format_version=3)
    )


def chained(trail_id: str, payloads: list[str]) -> list[tuple[int, str, str, str]]:
    records, prev = [], chain.genesis_hash(trail_id)
    for seq, payload in enumerate(payloads):
        digest = chain.record_hash(trail_id, seq, prev, payload)
        records.append((seq, prev, digest, payload))
        prev = digest
    return records


def make_trail(trail_id: str) -> list[tuple[int, str, str, str]]:
    """A format-v3 trail: the request, two decisions, the answer."""
    return chained(
        trail_id, [request_payload(), decision_payload(0), decision_payload(1), answer_payload()]
    )


def disclosed(withheld: tuple[str, ...] = ()) -> bundle.Texts:
    """The bundle's texts, as audit.export discloses them: each field with its own salt, and
    the token slots the texts it discloses allow (all of them when it withholds nothing)."""
    texts = {
        **QUESTION.texts(),
        binding.ANSWER_TEXT: ANSWER_TEXT,
        binding.ANSWER_TOKEN_IDS: chain.canonical_json(list(ANSWER_IDS)),
    }
    disclosures = {}
    for name, text in texts.items():
        if name in withheld:
            disclosures[name] = {"withheld": True}
            continue
        disclosures[name] = {"salt": binding.field_salt(SALT, name)}
        if name not in (binding.RENDERED, binding.ANSWER_TEXT):
            disclosures[name]["value"] = json.loads(text)
    emitted = {"step.0.drafted.0", "step.0.correction", "step.1.drafted.0", "step.1.correction"}
    for name, value in slot_values().items():
        if not withheld or (name in emitted and binding.ANSWER_TEXT not in withheld):
            disclosures[name] = {"salt": sealing.slot_salt(SALT, name), "value": value}
    prompt = "" if binding.RENDERED in withheld else QUESTION.rendered
    answer = "" if binding.ANSWER_TEXT in withheld else ANSWER_TEXT
    return bundle.Texts(disclosures, prompt, answer)


def leaf_for(trail_id: str, records, outcome: str = "succeeded", format_version: int = 3) -> str:
    head = records[-1][2] if records else chain.genesis_hash(trail_id)
    return chain.ledger_payload(
        format_version=format_version,
        trail_id=trail_id,
        job_id=JOB,
        record_count=len(records),
        head_hash=head,
        outcome=outcome,
    )


def other_leaf(i: int) -> str:
    trail = f"00000000-0000-4000-8000-{i:012d}"
    return chain.ledger_payload(
        format_version=2,
        trail_id=trail,
        job_id=JOB,
        record_count=i,
        head_hash=hashlib.sha256(bytes([i])).hexdigest(),
        outcome="failed" if i % 2 else "succeeded",
    )


@pytest.fixture(scope="module")
def key():
    return checkpoints.generate_signing_key(ORIGIN)


def first_named(records) -> tuple[dict, dict]:
    return bundle_format.described(json.loads(records[0][3]) if records else None)


def build(
    key,
    *,
    records=None,
    sealed=None,
    checkpoint_size=None,
    leaf_payload=None,
    outcome="succeeded",
    format_version=3,
    **over,
):
    """A realistic bundle: a 4-record trail sealed as entry 4 of a 7-entry ledger.

    `sealed` are the records the log sealed (default: `records`); `leaf_payload` overrides the
    bundle's ledger leaf (default: the log's entry)."""
    private, verifier = key
    records = make_trail(TRAIL) if records is None else records
    payloads = [other_leaf(i) for i in range(7)]
    payloads[LEAF_INDEX] = leaf_for(
        TRAIL, records if sealed is None else sealed, outcome, format_version
    )
    leaves = [p.encode() for p in payloads]
    size = len(leaves) if checkpoint_size is None else checkpoint_size
    note = checkpoints.sign_checkpoint(ORIGIN, size, merkle.root(leaves[:size]), private)
    fields = dict(
        records=records,
        trail_id=TRAIL,
        format_version=format_version,
        ledger_index=LEAF_INDEX,
        ledger_payload=payloads[LEAF_INDEX] if leaf_payload is None else leaf_payload,
        proof=merkle.inclusion_proof(LEAF_INDEX, leaves),
        tree_size=len(leaves),
        checkpoint_note=note,
        verifier_key=verifier,
        texts=disclosed() if format_version >= 2 else bundle.NO_TEXTS,
        # What the first record names, as the exporter derives them (audit.export.described).
        **dict(zip(("models", "params"), first_named(records), strict=True)),
    )
    fields.update(over)
    return bundle.bundle_bytes(**fields)


def failed_checks(data: bytes, key: str | None = None) -> set[str]:
    return {c.name for c in check_bundle(data, keys=[key] if key else []) if not c.ok}


def test_a_good_bundle_verifies(key, tmp_path, capsys):
    data = build(key)
    path = tmp_path / "bundle.zip"
    digest = bundle.write_bundle(path, **_fields_of(key))
    assert path.read_bytes() == data and digest == hashlib.sha256(data).hexdigest()
    assert verify_bundle(path) == []
    assert verify_bundle(data, keys=[key[1]]) == []
    names = [c.name for c in check_bundle(data, keys=[key[1]])]
    assert names == [
        "zip container",
        "members",
        "manifest",
        "records and chain",
        "ledger leaf",
        "decision rule",
        "leaf hash",
        "inclusion proof",
        "question and answer",
        "models and params",
        "receipt",
        "destruction",
        "checkpoint signature",
        "pinned key",
        "descriptive files",
    ]
    # Unpinned, it does not say VERIFIED, and exits non-zero unless told that is known.
    assert offline_verify.main([str(path)]) == offline_verify.EXIT_UNPINNED
    out = capsys.readouterr().out
    assert "FAIL" not in out and "NOT VERIFIED" in out and "NO LOG KEY PINNED" in out
    assert offline_verify.main([str(path), "--allow-unpinned"]) == 0
    out = capsys.readouterr().out
    assert "NO LOG KEY PINNED" in out and "CONSISTENT BUT UNPINNED" in out
    assert offline_verify.main([str(path), "--key", key[1]]) == 0
    out = capsys.readouterr().out
    assert "NO LOG KEY PINNED" not in out and "RESULT: VERIFIED" in out
    # It prints the question and the answer it verified.
    assert "    | Quote clause 7 of the lease: " in out and f"    | {ANSWER_TEXT}" in out


def _fields_of(key):
    """write_bundle's arguments for build(key), recovered from the bundle it makes."""
    data = build(key)
    members = dict(_members(data))
    import json

    chain_doc = json.loads(members["chain.json"])
    leaf = json.loads(members["ledger-leaf.json"])
    disclosures = json.loads(members["disclosures.json"])
    proof = json.loads(members["inclusion-proof.json"])
    records_text = members["records.jsonl"].decode().split("\n")[:-1]
    return dict(
        records=[
            (r["seq"], r["prev_hash"], r["record_hash"], p)
            for r, p in zip(chain_doc["records"], records_text, strict=True)
        ],
        trail_id=chain_doc["trail_id"],
        format_version=chain_doc["format_version"],
        ledger_index=leaf["index"],
        ledger_payload=leaf["payload"],
        proof=[bytes.fromhex(p) for p in proof["proof"]],
        tree_size=proof["tree_size"],
        checkpoint_note=members["checkpoint.txt"].decode(),
        verifier_key=members["verifier-key.txt"].decode().strip(),
        texts=bundle.Texts(
            disclosures, members["prompt.txt"].decode(), members["answer.txt"].decode()
        ),
        models=json.loads(members["models.json"]),
        params=json.loads(members["params.json"]),
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
    members = dict(_members(build(key)))
    records = make_trail(TRAIL)
    assert members["records.jsonl"] == "".join(p + "\n" for *_, p in records).encode()
    chain_doc = json.loads(members["chain.json"])
    assert chain_doc["genesis_hash"] == chain.genesis_hash(TRAIL)
    assert chain_doc["head_hash"] == records[-1][2] and chain_doc["record_count"] == 4
    assert chain_doc["format_version"] == 3
    assert members["prompt.txt"] == QUESTION.rendered.encode()
    assert members["answer.txt"] == ANSWER_TEXT.encode()
    disclosures = json.loads(members["disclosures.json"])
    bound = {name for name in disclosures if not sealing.is_slot_name(name)}
    assert bound == {*QUESTION.texts(), binding.ANSWER_TEXT, binding.ANSWER_TOKEN_IDS}
    assert set(disclosures) - bound == set(slot_values())  # nothing withheld: every slot opened
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
    """Other changes than a low-bit flip, on every 7th byte of an empty trail's bundle (for
    time)."""
    data = build(key, records=[], outcome="failed", texts=bundle.Texts({}))
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
    failures = verify_bundle(data, keys=[other])
    assert any("none of the keys you pinned" in f for f in failures)
    assert failed_checks(data, key=other) == {"pinned key"}
    path = tmp_path / "b.zip"
    path.write_bytes(data)
    assert offline_verify.main([str(path), "--key", other]) == 1
    assert "RESULT: FAILED" in capsys.readouterr().out
    assert verify_bundle(data, keys=["not a key"])
    # Pinning several keys (a rotated log) accepts a bundle signed by any one of them.
    assert verify_bundle(data, keys=[other, key[1]]) == []


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
    records = make_trail(TRAIL)
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
    records = make_trail(TRAIL)
    seq, prev, _, payload = records[1]
    # An edit the decision rule cannot see (the rationale is prose): only the hashes catch it.
    edited = payload.replace("resampled the second", "kept the second")
    # 1. Edited payload, hashes left alone: the chain breaks.
    tampered = [records[0], (seq, prev, records[1][2], edited), *records[2:]]
    assert failed_checks(build(key, records=tampered, sealed=records)) == {"records and chain"}
    # 2. The chain re-hashed from there on: the ledger leaf no longer matches the head.
    rehashed = chained(TRAIL, [records[0][3], edited, *(r[3] for r in records[2:])])
    assert failed_checks(build(key, records=rehashed, sealed=records)) == {"ledger leaf"}
    # 3. The leaf rewritten to match too: now the leaf is not in the signed tree.
    data = build(key, records=rehashed, sealed=records, leaf_payload=leaf_for(TRAIL, rehashed))
    assert failed_checks(data) == {"inclusion proof"}
    # 4. The answer dropped from the end, the leaf consistent with the shorter trail: the trail
    # no longer ends with its answer (whose text answer.txt claims), and the leaf is not the
    # signed one.
    shorter = records[:-1]
    data = build(key, records=shorter, sealed=records, leaf_payload=leaf_for(TRAIL, shorter))
    assert failed_checks(data) == {"ledger leaf", "inclusion proof", "question and answer"}


def test_a_service_that_signs_a_broken_decision_is_caught(key):
    """A dishonest service re-signs altered records with the very key the examiner trusts:
    chain, leaf, proof and signature all hold, and the decision rule check still fails."""
    records = make_trail(TRAIL)
    honest_u = decimal(uniform(7, 0, 0, "accept"))
    forged = records[1][3].replace(f'"u":"{honest_u}"', '"u":"0.75"')
    assert forged != records[1][3]
    rehashed = chained(TRAIL, [records[0][3], forged, *(r[3] for r in records[2:])])
    data = build(key, records=rehashed, sealed=rehashed, leaf_payload=leaf_for(TRAIL, rehashed))
    checks = {c.name: c for c in check_bundle(data, keys=[key[1]])}
    assert [n for n, c in checks.items() if not c.ok] == ["decision rule"]
    assert "drafted[0].u '0.75' is not the RNG's accept draw" in checks["decision rule"].failures[0]


def test_a_non_canonical_payload_is_caught_even_when_its_hashes_match(key):
    records = make_trail(TRAIL)
    spaced = records[1][3].replace('"v":3', '"v": 3')
    data = build(key, records=chained(TRAIL, [records[0][3], spaced, *(r[3] for r in records[2:])]))
    assert "records and chain" in failed_checks(data)
    assert any("canonical" in f for f in verify_bundle(data))


def test_an_edited_answer_txt_is_caught_even_with_a_matching_manifest(key):
    data = build(key, texts=bundle.Texts(disclosed().disclosures, QUESTION.rendered, "Void."))
    assert failed_checks(data) == {"question and answer"}
    assert any("answer.text is not the text whose digest" in f for f in verify_bundle(data))
    # The same with the answer record rewritten to the forged text: the chain and leaf break.
    records = make_trail(TRAIL)
    forged = chained(TRAIL, [*(r[3] for r in records[:-1]), answer_payload("Void.")])
    data = build(
        key,
        records=forged,
        sealed=records,
        texts=bundle.Texts(disclosed().disclosures, QUESTION.rendered, "Void."),
    )
    assert "ledger leaf" in failed_checks(data)


def test_a_withheld_text_leaves_the_bundle_verifiable_and_says_so(key, tmp_path, capsys):
    withheld = (binding.GIVEN, binding.RENDERED, binding.TOKEN_IDS)
    data = build(key, texts=disclosed(withheld))
    assert verify_bundle(data, keys=[key[1]]) == []
    detail = next(c.detail for c in check_bundle(data) if c.name == "question and answer")
    assert "prompt.rendered withheld" in detail and "answer.text matches its digest" in detail
    path = tmp_path / "withheld.zip"
    path.write_bytes(data)
    assert offline_verify.main([str(path), "--key", key[1]]) == 0
    assert "QUESTION (prompt.txt, the rendered prompt): (withheld" in capsys.readouterr().out
    # Declared withheld, yet present: refused.
    sneaky = bundle.Texts(disclosed(withheld).disclosures, QUESTION.rendered, ANSWER_TEXT)
    assert failed_checks(build(key, texts=sneaky)) == {"question and answer"}


def test_a_forged_answer_txt_on_a_trail_with_no_answer_record_is_refused(key):
    """A failed trail binds the question but no answer: answer.txt must stay empty, or the
    verifier would print text no record vouches for as "the output text as served"."""
    failed = chained(TRAIL, [request_payload(), decision_payload(0)])
    answered = (binding.ANSWER_TEXT, binding.ANSWER_TOKEN_IDS)
    prompt_only = {
        n: e
        for n, e in disclosed().disclosures.items()
        if n not in answered and not n.startswith("step.1.")  # the trail has step 0 alone
    }
    honest = build(
        key, records=failed, outcome="failed", texts=bundle.Texts(prompt_only, QUESTION.rendered)
    )
    assert verify_bundle(honest, keys=[key[1]]) == []
    forged = build(
        key,
        records=failed,
        outcome="failed",
        texts=bundle.Texts(prompt_only, QUESTION.rendered, "The clause is void."),
    )
    failures = verify_bundle(forged, keys=[key[1]])
    assert any("answer.txt holds text that no record of this trail binds" in f for f in failures)
    findings = offline_verify.inspect_bundle(forged, keys=[key[1]])
    assert findings.answer is None


def test_a_disclosure_of_another_form_is_refused(key):
    loose = disclosed().disclosures
    loose[binding.ANSWER_TEXT] = {**loose[binding.ANSWER_TEXT], "value": "Void."}
    loose[binding.RENDERED] = {"withheld": 1}
    data = build(key, texts=bundle.Texts(loose, QUESTION.rendered, ANSWER_TEXT))
    failures = verify_bundle(data)
    assert any("disclosure of answer.text must be ['salt']" in f for f in failures)
    assert any("disclosure of prompt.rendered must be ['salt']" in f for f in failures)


def test_a_leaf_that_seals_another_job_is_refused(key):
    records = make_trail(TRAIL)
    leaf = json.loads(leaf_for(TRAIL, records))
    leaf["job"] = "99999999-9999-4999-8999-999999999999"
    other = chain.canonical_json(leaf)
    failures = verify_bundle(build(key, leaf_payload=other))
    assert any("seals another job than the request record names" in f for f in failures)


def test_a_v1_trail_still_verifies_and_binds_no_texts(key):
    decision = {k: v for k, v in clear_decision(0).items() if k != "kind"}
    v1 = chained(TRAIL, [chain.canonical_json({**decision, "v": 1})])
    data = build(key, records=v1, format_version=1)
    assert verify_bundle(data, keys=[key[1]]) == []
    detail = next(c.detail for c in check_bundle(data) if c.name == "question and answer")
    assert "binds no question or answer" in detail


def test_compressed_or_oversized_members_are_refused_before_they_are_read(key, monkeypatch):
    # A deflate bomb: 200 MB of zeros in a few hundred kilobytes.
    bomb = io.BytesIO()
    with (
        zipfile.ZipFile(bomb, "w", compression=zipfile.ZIP_DEFLATED) as archive,
        archive.open("records.jsonl", "w") as member,
    ):
        for _ in range(200):
            member.write(bytes(1 << 20))
    assert len(bomb.getvalue()) < 1 << 20
    started = time.perf_counter()
    failures = verify_bundle(bomb.getvalue())
    assert time.perf_counter() - started < 5
    assert any("is compressed" in f for f in failures)
    monkeypatch.setattr(offline_verify, "MAX_MEMBER_BYTES", 100)
    failures = verify_bundle(build(key))
    assert any("records.jsonl' is over 100 bytes; not read" in f for f in failures)
    monkeypatch.setattr(offline_verify, "MAX_BUNDLE_BYTES", 100)
    assert any("over the 100 limit" in f for f in verify_bundle(build(key)))


def test_members_missing_extra_or_reordered_are_reported_with_a_valid_manifest(key):
    members = _members(build(key))
    body = members[:-1]

    def repack(parts):
        manifest = bundle_format.manifest_member([p for p in parts if p[0] != "manifest.json"])
        return bundle_format.deterministic_zip([*parts, ("manifest.json", manifest)])

    extra = repack([*body, ("notes.txt", b"hello")])
    assert any("unexpected: 'notes.txt'" in f for f in verify_bundle(extra))
    missing = repack([m for m in body if m[0] != "params.json"])
    assert any("missing: params.json" in f for f in verify_bundle(missing))
    swapped = repack([body[1], body[0], *body[2:]])
    assert failed_checks(swapped) == {"members"}


@pytest.mark.parametrize(
    ("member", "edit"),
    [
        ("params.json", lambda v: {**v, "temperature": "0.0"}),
        ("params.json", lambda v: {**v, "system_prompt": "Answer only in French."}),
        ("models.json", lambda v: {**v, "target": {**v["target"], "name": "gpt-4"}}),
        ("models.json", lambda v: {**v, "target": {**v["target"], "sha256": "0" * 64}}),
    ],
    ids=["temperature", "added system prompt", "model name", "model hash"],
)
def test_rewritten_params_or_models_fail_though_the_manifest_was_redone(key, member, edit):
    """The examiner's edit: the member rewritten in the bundle's JSON form, the manifest and
    zip rebuilt. The records, hashed and signed, did not change, so the member is not theirs."""
    members = dict(_members(build(key)))
    members[member] = bundle_format.json_member(edit(json.loads(members[member])))
    body = [(n, d) for n, d in members.items() if n != "manifest.json"]
    manifest = bundle_format.manifest_member(body)
    data = bundle_format.deterministic_zip([*body, ("manifest.json", manifest)])
    assert failed_checks(data) == {"models and params"}


def test_an_empty_trail_bundle_verifies(key):
    # A job that failed before its request was recorded (its models did not load).
    data = build(key, records=[], outcome="failed", texts=bundle.Texts({}))
    assert verify_bundle(data) == []
    # A served trail must end with its answer.
    assert "ledger leaf" in failed_checks(build(key, records=[], texts=bundle.Texts({})))


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
    assert run.stdout.count("\nOK ") == 14  # and receipt.cose, empty here, a SKIP
    path.write_bytes(build(key)[:-1])
    run = subprocess.run(
        [sys.executable, "-m", "audit.offline_verify", str(path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 1 and "FAIL  zip container" in run.stdout


EVIDENCE = sorted(p.stem for p in (ROOT / "audit" / "evidence").glob("*.py"))
# What an examiner installs: the standard library, `cryptography`, ReportLab for the report, and
# sigstore's rfc3161-client for --tsa-cert (audit.evidence.timestamps).
THIRD_PARTY = {"cryptography", "reportlab", "rfc3161_client"}


def test_the_evidence_package_never_imports_django():
    modules = ", ".join(f"audit.evidence.{m}" for m in EVIDENCE if m != "__init__")
    code = (
        f"import sys, {modules}; "
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
        "('django', 'rest_framework', 'numpy', 'celery', 'decoding', 'reviewers')); "
        "assert not bad, bad"
    )
    run = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr


@pytest.mark.parametrize("module", EVIDENCE)
def test_the_evidence_modules_import_only_the_package_and_what_an_examiner_installs(module):
    tree = ast.parse((ROOT / "audit" / "evidence" / f"{module}.py").read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [node.module or ""]
        else:
            continue
        for name in names:
            top = name.split(".")[0]
            if top == "__future__" or top in sys.stdlib_module_names or top in THIRD_PARTY:
                continue
            assert name.startswith("audit.evidence"), f"{module} imports {name}"


def test_the_examiners_command_keeps_its_name():
    run = subprocess.run(
        [sys.executable, "-m", "audit.offline_verify", "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0 and "--unproven-descriptive" in run.stdout


def _repacked(data: bytes, edits: dict, version: int = bundle_format.BUNDLE_FORMAT_VERSION):
    """The bundle with members replaced (None drops one) and a manifest redone for them, as a
    forger who knows the format would."""
    members = dict(_members(data)[:-1])
    for name, value in edits.items():
        if value is None:
            del members[name]
        else:
            members[name] = value
    body = list(members.items())
    manifest = bundle_format.manifest_member(body, version)
    return bundle_format.deterministic_zip([*body, ("manifest.json", manifest)])


@pytest.mark.parametrize(
    ("member", "forged"),
    [
        ("README.txt", lambda b: b.replace(b"(attempt 1)", b"(attempt 1), sealed on 2020-01-01")),
        ("README.txt", lambda b: b.replace(b"I, _____", b"I, Jane Doe")),
        ("verification.txt", lambda b: b + b"- the trail was reviewed by a judge\n"),
        ("report.pdf", lambda b: b.replace(b"/Author (Pathfinder)", b"/Author (Someone)")),
        ("report.pdf", lambda b: b"%PDF-1.4\n% a made-up report\n"),
    ],
)
def test_a_rewritten_descriptive_member_fails_though_the_manifest_was_redone(key, member, forged):
    data = build(key)
    original = dict(_members(data))[member]
    changed = forged(original)
    assert changed != original
    forged_bundle = _repacked(data, {member: changed})
    failures = verify_bundle(forged_bundle, keys=[key[1]])
    assert failures == [
        f"descriptive files: {member} is not what the bundle's evidence makes "
        "(audit.evidence.descriptive)"
    ]


def test_the_descriptive_members_say_what_the_evidence_says(key):
    members = dict(_members(build(key)))
    readme, verification = members["README.txt"].decode(), members["verification.txt"].decode()
    assert f"Trail {TRAIL} of generation job" in readme and verification in readme
    assert f"- trail {TRAIL} (job " in verification and "4 records chained" in verification
    assert f"ledger entry {LEAF_INDEX} seals" in verification
    assert members["report.pdf"].startswith(b"%PDF-")


@pytest.mark.parametrize("version", [2, 3])
def test_an_older_bundle_format_fails_unless_its_descriptive_members_are_disregarded(key, version):
    data = build(key)
    edits = {"README.txt": b"Anything at all.\n", "receipt.cose": None, "destruction.json": None}
    if version == 2:
        edits["report.pdf"] = None
    older = _repacked(data, edits, version)
    assert failed_checks(older) == {"descriptive files"}
    checks = check_bundle(older, keys=[key[1]], unproven_descriptive=True)
    assert all(c.ok for c in checks)
    assert "not evidence" in checks[-1].detail
    # A format-2 manifest over format-3 members (or the reverse) is still refused.
    assert "manifest" in failed_checks(_repacked(data, {}, 2))


def test_a_timestamp_with_no_authority_pinned_must_still_be_one(key, tmp_path):
    """Without --tsa-cert nothing can check the authority's signature, but noise, and a
    genuine timestamp of another document, are refused; one of checkpoint.txt is UNVERIFIED."""
    authority = OpenSSLAuthority(tmp_path)

    def stamp(document: bytes) -> bytes:
        (tmp_path / "note").write_bytes(document)
        query = subprocess.run(
            ["openssl", "ts", "-query", "-data", "note", "-sha256", "-cert"],
            cwd=tmp_path, capture_output=True, check=True,
        ).stdout  # fmt: skip
        return authority.reply(query)

    with zipfile.ZipFile(io.BytesIO(build(key))) as archive:
        note = archive.read("checkpoint.txt")
    real = stamp(note)
    ok = {c.name: c for c in check_bundle(build(key, timestamp_token=real), keys=[key[1]])}
    assert ok["timestamp"].ok and ok["timestamp"].skipped
    assert ok["timestamp"].detail.startswith("UNVERIFIED: checkpoint.tsr is a granted RFC 3161")
    foreign = stamp(b"another document")
    for garbage in (
        b"not a timestamp",
        real[:-1],
        real + b"\x00",
        b"\x30\x03\x02\x01\x02",
        foreign,
    ):
        data = build(key, timestamp_token=garbage)
        assert failed_checks(data) == {"timestamp"}, garbage[:8]
    failures = verify_bundle(build(key, timestamp_token=foreign), keys=[key[1]])
    assert failures == [
        "timestamp: checkpoint.tsr timestamps another document: its imprint is not checkpoint.txt's"
    ]

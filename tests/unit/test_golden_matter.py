"""The golden matter bundle (tests/data/sample-matter.zip, matter format 2) and its log's public
entry tiles (tests/data/sample-log/) are committed data, like the golden one-trail bundle: the
code must reproduce them byte for byte, and the bundle verifies whole under the golden keys,
witness included, and complete against that log."""

import io
import json
import zipfile
from pathlib import Path

from audit.evidence import bundle_format
from audit.evidence.offline_verify import check_bundle, verify_bundle
from tests.data import make_golden_matter

DATA = Path(__file__).parents[1] / "data"
SAMPLE = (DATA / "sample-matter.zip").read_bytes()
KEYS = json.loads((DATA / "audit_golden_vectors_v2.json").read_text("utf-8"))["keys"]


def test_the_code_reproduces_the_committed_matter_bundle_byte_for_byte():
    assert make_golden_matter.build() == SAMPLE
    for path, body in make_golden_matter.log_files().items():
        assert (DATA / "sample-log" / path).read_bytes() == body


def test_it_is_complete_against_its_log_and_a_dropped_trail_shows():
    from audit.evidence import descriptive

    pins = {"keys": [KEYS["log_verifier"]], "log": str(DATA / "sample-log")}
    checks = {c.name: c for c in check_bundle(SAMPLE, **pins)}
    assert checks["completeness"].ok and not checks["completeness"].skipped
    assert "the matter's 2 leaves" in checks["completeness"].detail

    def drop_abandoned(members):  # a first attempt, nothing names it: only the log can tell
        matter = json.loads(members["matter.json"])
        gone = make_golden_matter.ABANDONED_TRAIL
        matter["trails"] = [t for t in matter["trails"] if t["trail_id"] != gone]
        members["matter.json"] = bundle_format.json_member(matter)
        for name in [n for n in members if n.startswith(f"trails/{gone}/")]:
            del members[name]
        members.update(descriptive.matter_descriptive(members))

    forged = rezipped(SAMPLE, drop_abandoned)
    assert verify_bundle(forged, keys=pins["keys"]) == []
    assert verify_bundle(forged, **pins) == [
        f"completeness: leaf 3 seals trail {make_golden_matter.ABANDONED_TRAIL} (job "
        f"{make_golden_matter.ABANDONED_JOB}) of this matter, neither in the bundle nor listed "
        "as left out"
    ]


def test_the_matter_format_1_sample_verifies_and_says_completeness_cannot_be_checked():
    old = (DATA / "legacy" / "sample-matter-matter-format1.zip").read_bytes()
    pins = {"keys": [KEYS["log_verifier"]]}
    assert verify_bundle(old, **pins) == []
    checks = {c.name: c for c in check_bundle(old, **pins)}
    assert checks["completeness"].skipped and "--log" in checks["completeness"].detail


def downgraded(members):  # the examiner's downgrade: no key, so nothing to find the leaves by
    matter = json.loads(members["matter.json"])
    del matter["matter_key"]
    matter["format_version"] = 1
    members["matter.json"] = bundle_format.json_member(matter)
    members.update(descriptive_of(members))


def descriptive_of(members):
    from audit.evidence import descriptive

    return descriptive.matter_descriptive(members)


def test_a_bundle_downgraded_below_its_leaves_format_fails_with_and_without_the_log():
    forged = rezipped(SAMPLE, downgraded)
    pins = {"keys": [KEYS["log_verifier"]]}
    failures = verify_bundle(forged, **pins)
    assert failures and all("carries a matter tag" in f for f in failures), failures
    failures = verify_bundle(forged, **pins, log=str(DATA / "sample-log"))
    assert any(
        f.startswith("completeness: the log's leaf 0 carries a matter tag") for f in failures
    )


def test_a_false_reason_for_leaving_a_trail_out_is_refuted_by_the_log():
    def left_out_as(reason):
        def change(members):
            matter = json.loads(members["matter.json"])
            gone = make_golden_matter.ABANDONED_TRAIL
            matter["trails"] = [t for t in matter["trails"] if t["trail_id"] != gone]
            matter["left_out"] = [
                {"trail_id": gone, "job_id": make_golden_matter.ABANDONED_JOB, "reason": reason}
            ]
            members["matter.json"] = bundle_format.json_member(matter)
            for name in [n for n in members if n.startswith(f"trails/{gone}/")]:
                del members[name]
            members.update(descriptive_of(members))

        return change

    pins = {"keys": [KEYS["log_verifier"]], "log": str(DATA / "sample-log")}
    for reason in ("still open: its job has not ended", "sealed after the checkpoint of 5 trails"):
        failures = verify_bundle(rezipped(SAMPLE, left_out_as(reason)), **pins)
        assert len(failures) == 1 and "but leaf 3, under the checkpoint, seals it" in failures[0]
    outside = "outside the selection: its job was submitted on another day"
    failures = verify_bundle(rezipped(SAMPLE, left_out_as(outside)), **pins)
    assert len(failures) == 1 and "but leaf 3 shows it in the selection" in failures[0]

    def narrowed(members):  # and the selection narrowed to the day after the other trail's
        left_out_as(outside)(members)
        matter = json.loads(members["matter.json"])
        matter["since"] = "2026-12-06"
        members["matter.json"] = bundle_format.json_member(matter)
        members.update(descriptive_of(members))

    failures = verify_bundle(rezipped(SAMPLE, narrowed), **pins)
    assert any("it is not of the selection" in f for f in failures), failures


def rezipped(data: bytes, change) -> bytes:
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        members = {i.filename: archive.read(i) for i in archive.infolist()}
    change(members)
    body = [(n, d) for n, d in members.items() if n != "manifest.json"]
    return bundle_format.deterministic_zip(
        [*body, ("manifest.json", bundle_format.manifest_member(body))]
    )


def test_it_verifies_under_the_golden_keys_and_witness():
    pins = {"keys": [KEYS["log_verifier"]], "witness_keys": [KEYS["witness_verifier"]]}
    assert verify_bundle(SAMPLE, **pins) == []
    names = [c.name for c in check_bundle(SAMPLE, **pins)]
    for trail in (make_golden_matter.v2.TRAIL_ID, make_golden_matter.ABANDONED_TRAIL):
        assert f"trail {trail}: inclusion proof" in names and f"trail {trail}: listing" in names
    assert "witness cosignatures" in names


def test_it_lists_the_abandoned_attempt_marked():
    with zipfile.ZipFile(io.BytesIO(SAMPLE)) as archive:
        matter = json.loads(archive.read("matter.json"))
    assert [(t["outcome"], t["abandoned"]) for t in matter["trails"]] == [
        ("succeeded", False),
        ("abandoned", True),
    ]


def test_bundles_of_the_formats_before_4_fail_unless_their_descriptive_members_are_disregarded():
    """Golden samples as they were committed before bundle format 4: their README.txt,
    verification.txt and report.pdf cannot be proven, so they verify only when told to
    disregard those three, and then verify whole."""
    pins = {"keys": [KEYS["log_verifier"]], "witness_keys": [KEYS["witness_verifier"]]}
    for name in ("sample-bundle-format2.zip", "sample-matter-format3.zip"):
        old = (DATA / "legacy" / name).read_bytes()
        failures = verify_bundle(old, **pins)
        assert len(failures) == 1 and failures[0].startswith("descriptive files: bundle format")
        assert verify_bundle(old, **pins, unproven_descriptive=True) == []


def test_a_trail_in_the_bundle_cannot_also_be_declared_left_out():
    with zipfile.ZipFile(io.BytesIO(SAMPLE)) as archive:
        members = {i.filename: archive.read(i) for i in archive.infolist()}
    matter = json.loads(members["matter.json"])
    trail = matter["trails"][0]
    matter["left_out"] = [
        {"trail_id": trail["trail_id"], "job_id": trail["job_id"], "reason": "still open"}
    ]
    members["matter.json"] = bundle_format.json_member(matter)
    body = [(n, d) for n, d in members.items() if n != "manifest.json"]
    forged = bundle_format.deterministic_zip(
        [*body, ("manifest.json", bundle_format.manifest_member(body))]
    )
    failures = verify_bundle(forged, keys=[KEYS["log_verifier"]])
    assert (
        f"matter.json: trail {trail['trail_id']} is in the bundle and also listed as left out"
        in failures
    )


def test_a_fabricated_witness_line_is_never_named_a_signer():
    """The examiner's probe: a signature line "— witness.uscourts.example …" added to the
    checkpoint, the descriptive members made again. The note format ignores a line no pinned key
    names, so the bundle verifies; but what it says names that line as unverified, and a pinned
    key of that witness finds no cosignature."""
    import base64

    from audit.evidence import checkpoints, descriptive

    forged_line = "\u2014 witness.uscourts.example " + base64.b64encode(bytes(68)).decode()

    def add_line(members):
        members["checkpoint.txt"] = members["checkpoint.txt"] + forged_line.encode() + b"\n"
        members.update(descriptive.matter_descriptive(members))

    forged = rezipped(SAMPLE, add_line)
    assert verify_bundle(forged, keys=[KEYS["log_verifier"]]) == []
    with zipfile.ZipFile(io.BytesIO(forged)) as archive:
        claims = archive.read("verification.txt").decode()
    signed = next(line for line in claims.split("\n") if "the checkpoint states" in line)
    assert "signed by the key in verifier-key.txt (pathfinder.example/audit-log);" in signed
    assert (
        "signature lines named witness.example/golden, witness.uscourts.example, which no "
        "check here verifies"
    ) in signed
    _, court = checkpoints.generate_signing_key(
        "witness.uscourts.example", alg=checkpoints.ALG_COSIGNATURE
    )
    failures = verify_bundle(forged, keys=[KEYS["log_verifier"]], witness_keys=[court])
    assert failures and all(f.startswith("witness cosignatures:") for f in failures), failures


def test_bundles_of_format_4_still_verify_with_the_texts_of_their_format():
    """Format 4 named every signature line a signer; a bundle made then is held to that text."""
    for name in ("sample-bundle-format4.zip", "sample-matter-format4.zip"):
        old = (DATA / "legacy" / name).read_bytes()
        assert verify_bundle(old, keys=[KEYS["log_verifier"]]) == [], name
    with zipfile.ZipFile(io.BytesIO(old)) as archive:
        claims = archive.read("verification.txt").decode()
    assert "signed by pathfinder.example/audit-log, witness.example/golden\n" in claims

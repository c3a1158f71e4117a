"""Bundle format 6 (issue 43): each trail carries its RFC 9942 receipt and says whether its texts
were destroyed, and the texts name who directed the job. Written as the opposing examiner would
attack it, on the golden samples: a receipt of another leaf, of another key or altered by one
byte, a destruction stated while texts are still disclosed, a malformed statement, format 6's
members under an older format number. Each is refused by offline_verify and by the page's
verifier (verify.js under Node) alike; format 5 bundles still verify."""

import io
import json
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

from audit.evidence import bundle_format, checkpoints, descriptive, receipts
from audit.evidence.offline_verify import check_bundle, verify_bundle

DATA = Path(__file__).parents[2] / "data"
REPO = Path(__file__).parents[3]
KEYS = json.loads((DATA / "audit_golden_vectors_v2.json").read_text("utf-8"))["keys"]
KEY = KEYS["log_verifier"]
NODE = shutil.which("node")
DESTROYED = {
    "destroyed": True,
    "destroyed_at": "2026-12-07T09:30:00Z",
    "destroyed_by": "records.manager",
    "order": "Protective order para. 12 (S.D.N.Y.)",
}


def members_of(data: bytes) -> dict[str, bytes]:
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        return {info.filename: archive.read(info) for info in archive.infolist()}


def rezipped(members: dict[str, bytes], *, remake: bool = True, format_version: int = 6) -> bytes:
    """The members packed again with a correct manifest; `remake`: README.txt, verification.txt
    and report.pdf made again from them (a forger who knows the format and this code)."""
    if remake:
        members.update(descriptive.trail_descriptive(members, format_version))
    body = [(n, d) for n, d in members.items() if n != "manifest.json"]
    manifest = bundle_format.manifest_member(body, format_version)
    return bundle_format.deterministic_zip([*body, ("manifest.json", manifest)])


def sample(name: str = "sample-bundle-v4.zip") -> dict[str, bytes]:
    return members_of((DATA / name).read_bytes())


def destroyed_members() -> dict[str, bytes]:
    """The format-4 sample as an export after destruction makes it: nothing disclosed, no slot
    opened, the texts empty, the destruction stated."""
    members = sample()
    disclosures = json.loads(members["disclosures.json"])
    withheld = {n: {"withheld": True} for n in disclosures if not n.startswith("step.")}
    members["disclosures.json"] = bundle_format.json_member(withheld)
    members["prompt.txt"] = members["answer.txt"] = b""
    members["destruction.json"] = bundle_format.json_member(DESTROYED)
    return members


def other_trail_receipt() -> dict[str, bytes]:
    """A genuine receipt, signed by the log's key, but of another trail's leaf (the format-2
    sample's) under another checkpoint."""
    members = sample()
    members["receipt.cose"] = sample("sample-bundle.zip")["receipt.cose"]
    return members


def stranger_receipt() -> dict[str, bytes]:
    """The right leaf and path, signed by a key that is not the log's."""
    members = sample()
    stated = receipts.decode_receipt(members["receipt.cose"])
    stranger, _ = checkpoints.generate_signing_key("pathfinder.example/audit-log")
    kid, key = receipts.signer_for_note_key(stranger)
    note = checkpoints.parse_unverified(members["checkpoint.txt"].decode())
    members["receipt.cose"] = receipts.encode_receipt(
        private_key=key, kid=kid, tree_size=stated.tree_size, leaf_index=stated.leaf_index,
        proof=stated.path, root=note.root, issuer=note.origin,
    )  # fmt: skip
    return members


def flipped(members: dict[str, bytes], name: str, at: int) -> dict[str, bytes]:
    data = bytearray(members[name])
    data[at] ^= 0x01
    members[name] = bytes(data)
    return members


# name -> (the bundle's bytes, the check that must fail; None: it must verify)
CASES = {
    "intact": (lambda: rezipped(sample(), remake=False), None),
    "destroyed": (lambda: rezipped(destroyed_members()), None),
    "no receipt (a checkpoint from before receipts)": (
        lambda: rezipped({**sample(), "receipt.cose": b""}),
        None,
    ),
    "a byte of the receipt's signature flipped": (
        lambda: rezipped(flipped(sample(), "receipt.cose", -1)),
        "receipt",
    ),
    "a byte of the receipt's path flipped": (
        lambda: rezipped(flipped(sample(), "receipt.cose", -80)),
        "receipt",
    ),
    "the log's receipt of another trail": (lambda: rezipped(other_trail_receipt()), "receipt"),
    "a receipt signed by a stranger's key": (lambda: rezipped(stranger_receipt()), "receipt"),
    "destroyed, yet the answer is disclosed": (
        lambda: rezipped({**sample(), "destruction.json": bundle_format.json_member(DESTROYED)}),
        "destruction",
    ),
    "a destruction without its order": (
        lambda: rezipped(
            {
                **destroyed_members(),
                "destruction.json": bundle_format.json_member({**DESTROYED, "order": ""}),
            }
        ),
        "destruction",
    ),
    "a destruction at no time": (
        lambda: rezipped(
            {
                **destroyed_members(),
                "destruction.json": bundle_format.json_member(
                    {**DESTROYED, "destroyed_at": "yesterday"}
                ),
            }
        ),
        "destruction",
    ),
    "format 6's members called format 5": (
        lambda: rezipped(sample(), remake=False, format_version=5),
        "manifest",
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_offline_verify(name):
    make, failing = CASES[name]
    checks = check_bundle(make(), keys=[KEY])
    failed = {c.name for c in checks if not c.ok}
    if failing is None:
        assert not failed, [(c.name, c.failures) for c in checks if not c.ok]
    else:
        assert failing in failed, [(c.name, c.failures) for c in checks if not c.ok]


@pytest.mark.skipif(NODE is None, reason="node is not installed: verify.js cannot run")
@pytest.mark.parametrize("name", list(CASES))
def test_the_page_verifier_agrees(name, tmp_path):
    make, failing = CASES[name]
    data = make()
    (tmp_path / "b.zip").write_bytes(data)
    (tmp_path / "pins.json").write_text(json.dumps({"logKeys": [KEY]}))
    done = subprocess.run(
        [NODE, str(REPO / "tests/js/verify_bundle.cjs"), str(tmp_path / "b.zip"),
         str(tmp_path / "pins.json")],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    page = json.loads(done.stdout)
    # The same checks in the same order, so one count and one list: the same names, skipped
    # alike.
    ours = check_bundle(data, keys=[KEY])
    assert [(c["name"], c["skipped"]) for c in page["checks"]] == [
        (c.name, c.skipped) for c in ours
    ]
    failed = {c["name"] for c in page["checks"] if not c["ok"]}
    assert page["ok"] == (failing is None), [c for c in page["checks"] if not c["ok"]]
    if failing is not None:
        assert failing in failed, failed


def test_a_destroyed_trail_says_so_in_every_text():
    data = CASES["destroyed"][0]()
    members = members_of(data)
    readme, claims = members["README.txt"].decode(), members["verification.txt"].decode()
    assert (
        'Its texts were destroyed on 2026-12-07T09:30:00Z under the order "Protective order '
        'para. 12 (S.D.N.Y.)" (destruction.json).'
    ) in readme
    assert "its destruction.json states that its texts were destroyed on 2026-12-07T09:30:00Z" in (
        claims
    )
    checks = {c.name: c for c in check_bundle(data, keys=[KEY])}
    assert "destroyed on 2026-12-07T09:30:00Z" in checks["destruction"].detail
    assert "its receipt.cose is an RFC 9942 COSE receipt of ledger entry 2" in claims


def test_the_receipt_in_the_golden_sample_is_what_export_receipt_would_write():
    """The sample's receipt.cose checked the way an examiner's SCITT tool does, by our stricter
    reading: the leaf is ledger-leaf.json's payload, the key verifier-key.txt's."""
    members = sample("sample-bundle.zip")
    leaf = json.loads(members["ledger-leaf.json"])
    note = checkpoints.parse_unverified(members["checkpoint.txt"].decode())
    kid, public = receipts.key_for_verifier(KEY)
    assert receipts.receipt_problems(
        members["receipt.cose"], leaf=leaf["payload"].encode(), public_key=public, root=note.root,
        tree_size=note.size, leaf_index=leaf["index"], kid=kid, issuer=note.origin,
    ) == []  # fmt: skip


def test_bundles_of_format_5_still_verify_with_their_own_members_and_texts():
    for name in ("sample-bundle-format5.zip", "sample-matter-format5.zip"):
        old = (DATA / "legacy" / name).read_bytes()
        assert verify_bundle(old, keys=[KEY]) == [], name
        assert "receipt.cose" not in " ".join(members_of(old))
        assert b"Who directed it" not in members_of(old)["README.txt"]

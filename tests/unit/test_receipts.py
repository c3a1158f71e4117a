"""RFC 9942 COSE Receipts (audit.evidence.receipts, ADR 0030): every leaf of trees of many sizes
proves and verifies; a receipt of another leaf, key, path, algorithm or form does not; the byte
format is held by a committed receipt (tests/data/receipt-golden.cbor), read here with cbor2, a
CBOR decoder not ours."""

import json
from pathlib import Path

import cbor2
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from audit.evidence import checkpoints, merkle, receipts
from tests.data import make_receipt_golden

DATA = Path(__file__).parents[1] / "data"
GOLDEN = (DATA / "receipt-golden.cbor").read_bytes()
VECTOR = json.loads((DATA / "receipt-golden.json").read_text("utf-8"))
ORIGIN = "pathfinder.test/audit-log"
PRIVATE, VERIFIER = checkpoints.generate_signing_key(ORIGIN, bytes(32))
KID, KEY = receipts.signer_for_note_key(PRIVATE)
PUBLIC = KEY.public_key()


def leaves_of(size: int) -> list[bytes]:
    return [f'{{"seq":{i},"trail":"t-{i}"}}'.encode() for i in range(size)]


def receipt_of(leaves: list[bytes], index: int, **overrides) -> bytes:
    return receipts.encode_receipt(
        private_key=overrides.get("key", KEY),
        kid=overrides.get("kid", KID),
        tree_size=len(leaves),
        leaf_index=index,
        proof=overrides.get("proof", merkle.inclusion_proof(index, leaves)),
        root=merkle.root(leaves),
        issuer=ORIGIN,
        subject="trail-a",
    )


def forged(protected: dict, unprotected: dict, payload, root: bytes, key=KEY) -> bytes:
    """A COSE_Sign1 with these parts, validly signed over `root` (so only the form is wrong)."""
    protected_bytes = cbor2.dumps(protected, canonical=True)
    signature = key.sign(cbor2.dumps(["Signature1", protected_bytes, b"", root]))
    message = [protected_bytes, unprotected, payload, signature]
    return cbor2.dumps(cbor2.CBORTag(receipts.COSE_SIGN1_TAG, message), canonical=True)


def proof_bstr(size: int, index: int, path: list[bytes]) -> dict:
    return {396: {-1: [cbor2.dumps([size, index, path])]}}


@pytest.mark.parametrize("size", [*range(1, 34), 64, 100, 255, 256, 257, 1000])
def test_every_leaf_of_a_tree_proves_and_only_its_own(size):
    leaves = leaves_of(size)
    root = merkle.root(leaves)
    indexes = range(size) if size <= 64 else {0, 1, size // 2, size - 2, size - 1}
    for index in indexes:
        receipt = receipt_of(leaves, index)
        problems = receipts.receipt_problems(
            receipt, leaf=leaves[index], public_key=PUBLIC, root=root, kid=KID,
            issuer=ORIGIN, subject="trail-a",
        )  # fmt: skip
        assert problems == [], (size, index, problems)
        stated = receipts.decode_receipt(receipt)
        assert (stated.tree_size, stated.leaf_index) == (size, index)
        if size > 1:
            other = leaves[(index + 1) % size]
            assert receipts.receipt_problems(receipt, leaf=other, public_key=PUBLIC)


def test_a_tree_of_one_leaf_has_an_empty_path_and_its_leaf_hash_as_root():
    receipt = receipt_of([b"only"], 0)
    inclusion = cbor2.loads(cbor2.loads(receipt).value[1][396][-1][0])
    assert inclusion == [1, 0, []]
    root = merkle.leaf_hash(b"only")
    assert receipts.receipt_problems(receipt, leaf=b"only", public_key=PUBLIC, root=root) == []


def test_the_golden_receipt_is_reproduced_byte_for_byte():
    receipt, vector = make_receipt_golden.build()
    assert receipt == GOLDEN, "the receipt's byte format changed: see make_receipt_golden.py"
    assert vector == VECTOR and VECTOR["receipt"] == GOLDEN.hex()


def test_the_golden_receipt_read_with_cbor2_is_what_the_format_says():
    kid = bytes.fromhex(VECTOR["kid"])
    assert VECTOR["log_verifier"].split("+")[1] == VECTOR["kid"]  # the pinned key's id
    outer = cbor2.loads(GOLDEN)
    assert outer.tag == 18 and len(outer.value) == 4
    protected, unprotected, payload, signature = outer.value
    assert protected == cbor2.dumps(
        {1: -8, 4: kid, 15: {1: VECTOR["origin"], 2: VECTOR["subject"]}, 395: 1}
    )
    assert list(cbor2.loads(protected)) == [1, 4, 15, 395]  # deterministic order
    path = [bytes.fromhex(p) for p in VECTOR["path"]]
    assert unprotected == {396: {-1: [cbor2.dumps([7, 5, path])]}}
    assert payload is None and len(signature) == 64
    root = bytes.fromhex(VECTOR["root"])
    _, public = receipts.key_for_verifier(VECTOR["log_verifier"])
    public.verify(signature, cbor2.dumps(["Signature1", protected, b"", root]))
    leaf = VECTOR["leaves"][5].encode()
    assert receipts.receipt_problems(GOLDEN, leaf=leaf, public_key=public, root=root) == []
    assert cbor2.dumps(outer) == GOLDEN  # cbor2 writes the same bytes back


def ours_of(value):
    """cbor2's value in our decoder's types (its tag class for ours)."""
    if isinstance(value, cbor2.CBORTag):
        return receipts.CborTag(value.tag, ours_of(value.value))
    if isinstance(value, list):
        return [ours_of(v) for v in value]
    return value


def test_our_cbor_is_cbor2s_canonical_cbor():
    values = [
        0, 23, 24, 255, 256, 65535, 65536, 2**32 - 1, 2**32, 2**64 - 1, -1, -24, -25, -(2**64),
        b"", b"x" * 23, b"y" * 24, b"z" * 300, "", "é", "x" * 70000,
        [], [1, [2, [3]]], {}, {395: 1, 1: -8, 4: b"k", 15: {2: "s", 1: "i"}}, {-1: 0, -2: 1},
        None, cbor2.CBORTag(18, [b"", {}, None, b""]),
    ]  # fmt: skip
    # (cbor2's canonical=True orders map keys length first, RFC 7049's rule; ours bytewise,
    # RFC 8949 §4.2.1's. They agree on every map of a receipt, and on these.)
    for value in values:
        ours = receipts.cbor_encode(ours_of(value))
        assert ours == cbor2.dumps(value, canonical=True), value
        assert receipts.cbor_decode(ours) == ours_of(value)


@pytest.mark.parametrize(
    "data, why",
    [
        (b"\x18\x05", "shortest"),  # 5 in two bytes
        (b"\x19\x00\xff", "shortest"),
        (b"\x5f\x41\x00\xff", "indefinite"),
        (b"\xa2\x02\x00\x01\x00", "order"),  # keys out of order
        (b"\xa2\x01\x00\x01\x00", "order"),  # a key twice
        (b"\xf5", "simple"),  # true
        (b"\xf9\x3c\x00", "simple"),  # a half float
        (b"\x01\x02", "after"),
        (b"\x44\x00", "ends early"),
        (b"\x62\xff\xfe", "UTF-8"),
        (b"\x9b" + (2**63).to_bytes(8, "big"), "ends early"),  # a huge array, no allocation
        (b"\x81" * 20 + b"\x00", "deeply"),
    ],
)
def test_cbor_outside_the_deterministic_subset_is_refused(data, why):
    with pytest.raises(receipts.ReceiptError, match=why):
        receipts.cbor_decode(data)


def test_another_key_or_another_leaf_is_refused():
    leaves = leaves_of(7)
    receipt = receipt_of(leaves, 5)
    other = Ed25519PrivateKey.from_private_bytes(bytes([1] * 32)).public_key()
    problems = receipts.receipt_problems(receipt, leaf=leaves[5], public_key=other)
    assert problems and "signature does not verify" in problems[0]
    assert receipts.receipt_problems(receipt, leaf=leaves[4], public_key=PUBLIC)
    # The leaf hash in place of the leaf data (an easy mistake; scitt-cose's too) is refused.
    assert receipts.receipt_problems(receipt, leaf=merkle.leaf_hash(leaves[5]), public_key=PUBLIC)


def test_the_stated_kid_issuer_subject_and_root_must_be_the_expected_ones():
    leaves = leaves_of(7)
    receipt = receipt_of(leaves, 5)
    args = {"leaf": leaves[5], "public_key": PUBLIC}
    assert "receipt kid is" in receipts.receipt_problems(receipt, **args, kid=b"\0" * 4)[0]
    assert "receipt iss is" in receipts.receipt_problems(receipt, **args, issuer="x")[0]
    assert "receipt sub is" in receipts.receipt_problems(receipt, **args, subject="trail-b")[0]
    other_root = merkle.root(leaves[:6])
    problems = receipts.receipt_problems(receipt, **args, root=other_root)
    assert problems == [
        f"receipt proves the root {merkle.root(leaves).hex()} for 7 leaves, not the "
        f"checkpoint's {other_root.hex()}"
    ]


def test_an_altered_path_is_refused_even_when_signed_over_the_true_root():
    leaves = leaves_of(7)
    root = merkle.root(leaves)
    path = merkle.inclusion_proof(5, leaves)
    protected = {1: -8, 4: KID, 395: 1}
    for bad in ([path[0], bytes(32), path[2]], list(reversed(path)), path[:2], path + [root]):
        receipt = forged(protected, proof_bstr(7, 5, bad), None, root)
        assert receipts.receipt_problems(receipt, leaf=leaves[5], public_key=PUBLIC), bad
    # The same path with another index or size is refused where it folds another way...
    for size, index in ((7, 4), (6, 5), (7, 6)):
        receipt = forged(protected, proof_bstr(size, index, path), None, root)
        assert receipts.receipt_problems(receipt, leaf=leaves[5], public_key=PUBLIC)
    # ...but the size and index are not signed, only the root: leaf 5 of 8 folds as leaf 5 of
    # 7 does, so only the checkpoint's size (or the ledger leaf's index) pins them.
    resized = forged(protected, proof_bstr(8, 5, path), None, root)
    assert receipts.receipt_problems(resized, leaf=leaves[5], public_key=PUBLIC) == []
    problems = receipts.receipt_problems(
        resized, leaf=leaves[5], public_key=PUBLIC, root=root, tree_size=7, leaf_index=5
    )
    assert problems == ["receipt tree size is 8, not 7"]
    good = forged(protected, proof_bstr(7, 5, path), None, root)
    assert receipts.receipt_problems(good, leaf=leaves[5], public_key=PUBLIC) == []


@pytest.mark.parametrize(
    "protected, unprotected, attach, why",
    [
        ({1: -19, 4: "KID", 395: 1}, None, False, "RFC 9864's Ed25519"),
        ({1: -7, 4: "KID", 395: 1}, None, False, "not EdDSA"),
        ({1: -8, 4: "KID", 395: 2}, None, False, "vds"),
        ({1: -8, 395: 1}, None, False, "kid"),
        ({1: -8, 4: b"\x01\x02", 395: 1}, None, False, "kid"),
        ({1: -8, 2: [4], 4: "KID", 395: 1}, None, False, "labels Pathfinder does not write: 2"),
        ({1: -8, 4: "KID", 15: {1: "o", 6: 0}, 395: 1}, None, False, "CWT claims"),
        ({1: -8, 4: "KID", 15: {}, 395: 1}, None, False, "CWT claims"),
        ({1: -8, 4: "KID", 395: 1}, None, True, "attached"),
        ({1: -8, 4: "KID", 395: 1}, "two", False, "exactly one inclusion proof"),
        ({1: -8, 4: "KID", 395: 1}, "extra", False, "exactly vdp"),
    ],
)
def test_a_receipt_of_another_form_is_refused(protected, unprotected, attach, why):
    leaves = leaves_of(7)
    root = merkle.root(leaves)
    protected = {k: KID if v == "KID" else v for k, v in protected.items()}
    proof = proof_bstr(7, 5, merkle.inclusion_proof(5, leaves))
    if unprotected == "two":
        proof[396][-1] *= 2
    elif unprotected == "extra":
        proof[4] = KID
    receipt = forged(protected, proof, root if attach else None, root)
    problems = receipts.receipt_problems(receipt, leaf=leaves[5], public_key=PUBLIC)
    assert len(problems) == 1 and why in problems[0], problems


def test_any_changed_bit_or_truncation_is_refused_and_nothing_raises():
    leaf = VECTOR["leaves"][5].encode()
    _, public = receipts.key_for_verifier(VECTOR["log_verifier"])
    for offset in range(len(GOLDEN)):
        for bit in (0x01, 0x80):
            changed = bytearray(GOLDEN)
            changed[offset] ^= bit
            problems = receipts.receipt_problems(bytes(changed), leaf=leaf, public_key=public)
            assert problems, f"a changed bit at {offset} passed"
        assert receipts.receipt_problems(GOLDEN[:offset], leaf=leaf, public_key=public)
    assert receipts.receipt_problems(GOLDEN + b"\0", leaf=leaf, public_key=public)


def test_encode_refuses_what_it_cannot_sign_truthfully():
    leaves = leaves_of(7)
    with pytest.raises(ValueError, match="audit path of 3 hashes, not 2"):
        receipt_of(leaves, 5, proof=merkle.inclusion_proof(5, leaves)[:2])
    with pytest.raises(ValueError, match="4-byte"):
        receipt_of(leaves, 5, kid=bytes(32))
    with pytest.raises(ValueError, match="outside a tree"):
        receipts.encode_receipt(
            private_key=KEY, kid=KID, tree_size=3, leaf_index=3, proof=[], root=bytes(32)
        )


def test_the_keys_are_the_signed_note_keys():
    kid, public = receipts.key_for_verifier(VERIFIER)
    assert kid == KID and kid.hex() == VERIFIER.split("+")[1]
    assert public.public_bytes_raw() == PUBLIC.public_bytes_raw()
    with pytest.raises(checkpoints.CheckpointError):
        receipts.signer_for_note_key(VERIFIER)

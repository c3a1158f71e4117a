"""audit.evidence.checkpoints: C2SP signed-note checkpoints, pinned by golden vectors and Go's
own."""

import base64
import hashlib

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from audit.evidence import checkpoints
from audit.evidence.checkpoints import CheckpointError

# Golden vector: computed once by this module from a fixed seed and committed. A change here is a
# change of the byte format that every auditor's stored verifier key depends on.
GOLDEN_NAME = "pathfinder.example/ledger"
GOLDEN_SEED = bytes(range(32))
GOLDEN_PRIVATE = (
    "PRIVATE+KEY+pathfinder.example/ledger+12b044e9+AQABAgMEBQYHCAkKCwwNDg8QERITFBUWFxgZGhscHR4f"
)
GOLDEN_VERIFIER = "pathfinder.example/ledger+12b044e9+AQOhB7/zzhC+HXDdGOdLwJln5NYwm6UNXx3chmQSVTG4"
GOLDEN_PUBLIC = "03a107bff3ce10be1d70dd18e74bc09967e4d6309ba50d5f1ddc8664125531b8"
GOLDEN_ROOT = hashlib.sha256(b"pathfinder golden root").digest()
GOLDEN_NOTE = (
    "pathfinder.example/ledger\n"
    "7\n"
    "xup+0nAxTybJH23LpQjaZt9OeOePL/H5iXie0WTFUdk=\n"
    "\n"
    "\u2014 pathfinder.example/ledger "
    "ErBE6f+WpR0t+1OtIuESRtanMAMABxcdH1KbLRdQU7nlWJ36Fl0DeCHxAFqxt6g0A+eFXAaG75x+RJY2s/FRrik1pQo=\n"
)

# The reference example of golang.org/x/mod/sumdb/note (note_test.go): an independent check of
# the key-id derivation, the key string formats and the signature line.
GO_VERIFIER = "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW"
GO_PRIVATE = "PRIVATE+KEY+PeterNeumann+c74f20a3+AYEKFALVFGyNhPJEMzD1QIDr+Y7hfZx09iUvxdXHKDFz"
GO_TEXT = (
    "If you think cryptography is the answer to your problem,\n"
    "then you don't know what your problem is.\n"
)
GO_SIGNATURE_LINE = (
    "\u2014 PeterNeumann "
    "x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXgKvqfqdngotpRZb6KE6RyyBwJnAM=\n"
)


def test_golden_key_strings_and_key_id():
    private, verifier = checkpoints.generate_signing_key(GOLDEN_NAME, seed=GOLDEN_SEED)
    assert (private, verifier) == (GOLDEN_PRIVATE, GOLDEN_VERIFIER)
    key = checkpoints.parse_verifier_key(GOLDEN_VERIFIER)
    assert key.public_key.hex() == GOLDEN_PUBLIC
    # key id = SHA-256(name || 0x0A || 0x01 || public key)[:4], re-derived by hand
    expected = hashlib.sha256(GOLDEN_NAME.encode() + b"\n\x01" + key.public_key).digest()[:4]
    assert key.key_id == expected == bytes.fromhex("12b044e9")
    assert checkpoints.verifier_key_for(GOLDEN_PRIVATE) == GOLDEN_VERIFIER


def test_golden_note_is_reproduced_byte_for_byte_and_verifies():
    assert checkpoints.sign_checkpoint(GOLDEN_NAME, 7, GOLDEN_ROOT, GOLDEN_PRIVATE) == GOLDEN_NOTE
    cp = checkpoints.parse_and_verify(GOLDEN_NOTE, GOLDEN_VERIFIER)
    assert cp == checkpoints.Checkpoint(GOLDEN_NAME, 7, GOLDEN_ROOT)


def test_go_reference_key_and_signature():
    assert checkpoints.verifier_key_for(GO_PRIVATE) == GO_VERIFIER
    key = checkpoints.parse_verifier_key(GO_VERIFIER)
    assert key.name == "PeterNeumann" and key.key_id.hex() == "c74f20a3"
    blob = base64.b64decode(GO_SIGNATURE_LINE.split(" ")[2])
    assert blob[:4] == key.key_id
    seed = base64.b64decode(GO_PRIVATE.split("+", 4)[4])[1:]
    assert Ed25519PrivateKey.from_private_bytes(seed).sign(GO_TEXT.encode()) == blob[4:]


def test_round_trip_with_a_fresh_key():
    private, verifier = checkpoints.generate_signing_key("log.example.org/pathfinder")
    root = hashlib.sha256(b"r").digest()
    for size in (0, 1, 12345678901234):
        note = checkpoints.sign_checkpoint("log.example.org/pathfinder", size, root, private)
        assert checkpoints.parse_and_verify(note, verifier) == checkpoints.Checkpoint(
            "log.example.org/pathfinder", size, root
        )
        assert checkpoints.parse_and_verify(note.encode(), verifier).size == size
        assert checkpoints.parse_unverified(note).root == root


def test_any_single_byte_change_of_the_note_fails():
    data = GOLDEN_NOTE.encode("utf-8")
    tried = 0
    for i in range(len(data)):
        for mask in (1, 2, 4, 8, 16, 32, 64, 128):
            bad = bytearray(data)
            bad[i] ^= mask
            with pytest.raises(CheckpointError):
                checkpoints.parse_and_verify(bytes(bad), GOLDEN_VERIFIER)
            tried += 1
    assert tried == 8 * len(data)


def test_dropped_or_added_bytes_fail():
    data = GOLDEN_NOTE.encode("utf-8")
    for i in range(len(data)):
        with pytest.raises(CheckpointError):
            checkpoints.parse_and_verify(data[:i] + data[i + 1 :], GOLDEN_VERIFIER)
    for extra in (b"\n", b"x", b"garbage\n", b"\n\n", b" "):
        with pytest.raises(CheckpointError):
            checkpoints.parse_and_verify(data + extra, GOLDEN_VERIFIER)


def test_a_note_signed_by_another_key_fails():
    other_same_name, other_verifier = checkpoints.generate_signing_key(GOLDEN_NAME)
    forged = checkpoints.sign_checkpoint(GOLDEN_NAME, 7, GOLDEN_ROOT, other_same_name)
    with pytest.raises(CheckpointError, match="no signature by the key"):
        checkpoints.parse_and_verify(forged, GOLDEN_VERIFIER)
    with pytest.raises(CheckpointError, match="no signature by the key"):
        checkpoints.parse_and_verify(GOLDEN_NOTE, other_verifier)
    other_name, _ = checkpoints.generate_signing_key("someone.else/log")
    forged = checkpoints.sign_checkpoint(GOLDEN_NAME, 7, GOLDEN_ROOT, other_name)
    with pytest.raises(CheckpointError, match="wrong key name or key id"):
        checkpoints.parse_and_verify(forged, GOLDEN_VERIFIER)


def test_our_key_id_with_a_bad_signature_is_reported_as_such():
    body, _, sig_line = GOLDEN_NOTE.partition("\n\n")
    blob = bytearray(base64.b64decode(sig_line.split(" ")[2]))
    blob[10] ^= 1
    bad = f"{body}\n\n\u2014 {GOLDEN_NAME} {base64.b64encode(bytes(blob)).decode()}\n"
    with pytest.raises(CheckpointError, match="does not verify"):
        checkpoints.parse_and_verify(bad, GOLDEN_VERIFIER)


def test_a_witness_cosignature_line_is_tolerated_but_not_trusted():
    witness, _ = checkpoints.generate_signing_key("witness.example")
    cosigned = checkpoints.sign_checkpoint(GOLDEN_NAME, 7, GOLDEN_ROOT, witness)
    note = GOLDEN_NOTE + cosigned.split("\n\n")[1]
    assert checkpoints.parse_and_verify(note, GOLDEN_VERIFIER).size == 7
    with pytest.raises(CheckpointError, match="not start with"):
        checkpoints.parse_and_verify(GOLDEN_NOTE + "not a signature\n", GOLDEN_VERIFIER)


@pytest.mark.parametrize(
    "body",
    [
        "pathfinder.example/ledger\n07\nxup+0nAxTybJH23LpQjaZt9OeOePL/H5iXie0WTFUdk=\n",
        "pathfinder.example/ledger\n-7\nxup+0nAxTybJH23LpQjaZt9OeOePL/H5iXie0WTFUdk=\n",
        "pathfinder.example/ledger\n7\nxup+0nAxTybJH23LpQjaZt9OeOePL/H5iXie0WTFUdk=\next\n",
        "pathfinder.example/ledger\n7\nxup+0nAxTybJH23LpQjaZt9OeOePL/H5iXie0WTFUdk\n",
        "pathfinder.example/ledger\n7\nxup+0nAxTybJH23LpQjaZt9OeOePL/H5iXie0WTF\n",
        "\n7\nxup+0nAxTybJH23LpQjaZt9OeOePL/H5iXie0WTFUdk=\n",
        "pathfinder.example/ledger\n7\n",
    ],
)
def test_malformed_bodies_fail_even_when_signed(body):
    private = GOLDEN_PRIVATE
    _, _, seed_b64 = private.rpartition("+")
    seed = base64.b64decode(seed_b64)[1:]
    signature = Ed25519PrivateKey.from_private_bytes(seed).sign(body.encode())
    blob = base64.b64encode(bytes.fromhex("12b044e9") + signature).decode()
    note = f"{body}\n\u2014 {GOLDEN_NAME} {blob}\n"
    with pytest.raises(CheckpointError):
        checkpoints.parse_and_verify(note, GOLDEN_VERIFIER)


@pytest.mark.parametrize(
    "key",
    [
        "",
        "pathfinder.example/ledger",
        GOLDEN_VERIFIER.replace("12b044e9", "12b044e8"),
        GOLDEN_VERIFIER.replace("12b044e9", "12B044E9"),
        GOLDEN_VERIFIER.replace("+AQ", "+Ag"),
        GOLDEN_VERIFIER[:-1],
        GOLDEN_VERIFIER.replace("pathfinder", "pathfinder "),
        GOLDEN_PRIVATE,
    ],
)
def test_malformed_or_inconsistent_verifier_keys_are_refused(key):
    with pytest.raises(CheckpointError):
        checkpoints.parse_and_verify(GOLDEN_NOTE, key)


def test_bad_key_names_and_arguments_are_refused():
    for name in ("", "a+b", "a b", "a\tb"):
        with pytest.raises(CheckpointError):
            checkpoints.generate_signing_key(name)
    with pytest.raises(CheckpointError):
        checkpoints.sign_checkpoint(GOLDEN_NAME, 7, GOLDEN_ROOT[:31], GOLDEN_PRIVATE)
    with pytest.raises(CheckpointError):
        checkpoints.sign_checkpoint(GOLDEN_NAME, -1, GOLDEN_ROOT, GOLDEN_PRIVATE)
    with pytest.raises(CheckpointError):
        checkpoints.sign_checkpoint("two\nlines", 7, GOLDEN_ROOT, GOLDEN_PRIVATE)
    with pytest.raises(CheckpointError):
        checkpoints.sign_checkpoint(GOLDEN_NAME, 7, GOLDEN_ROOT, GOLDEN_VERIFIER)

"""Signed notes, checkpoints and witness cosignatures made by other implementations (the C2SP
specification, Go's sumdb, transparency-dev's witness, sunlight's skylight, production
ArmoredWitness devices), from tests/data/external_vectors.json: a format that only agrees with
itself cannot pass these."""

import base64
import hashlib
import json
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from audit.evidence import checkpoints
from audit.evidence.checkpoints import ALG_COSIGNATURE, CheckpointError

VECTORS = json.loads(
    (Path(__file__).parents[2] / "data" / "external_vectors.json").read_text("utf-8")
)


def ids(group):
    return [vector["source"].split(" ")[0] for vector in VECTORS[group]]


@pytest.mark.parametrize("vector", VECTORS["signed_notes"], ids=ids("signed_notes"))
def test_signed_notes_of_other_implementations_verify(vector):
    body = checkpoints.verify_signed_note(vector["note"], vector["verifier_key"])
    assert vector["note"].startswith(body + "\n")
    tampered = vector["note"].replace("example", "sample", 1).replace("answer", "question", 1)
    with pytest.raises(CheckpointError, match="does not verify"):
        checkpoints.verify_signed_note(tampered, vector["verifier_key"])


@pytest.mark.parametrize("vector", VECTORS["checkpoints"], ids=ids("checkpoints"))
def test_checkpoints_of_other_logs_verify_and_parse(vector):
    checkpoint = checkpoints.parse_and_verify(vector["note"], vector["verifier_key"])
    assert checkpoint.origin == vector["origin"] and checkpoint.size == vector["size"]
    assert checkpoint.root == base64.b64decode(vector["root_base64"])
    size_line = f"\n{vector['size']}\n"
    tampered = vector["note"].replace(size_line, f"\n{vector['size'] + 1}\n", 1)
    with pytest.raises(CheckpointError, match="does not verify"):
        checkpoints.parse_and_verify(tampered, vector["verifier_key"])


def test_our_signer_reproduces_a_checkpoint_of_another_implementation_byte_for_byte():
    vector = next(v for v in VECTORS["checkpoints"] if "signing_key" in v)
    assert checkpoints.verifier_key_for(vector["signing_key"]) == vector["verifier_key"]
    note = checkpoints.sign_checkpoint(
        vector["origin"],
        vector["size"],
        base64.b64decode(vector["root_base64"]),
        vector["signing_key"],
    )
    assert note == vector["note"]  # Ed25519 is deterministic: same key, same bytes


def _cosignature_key(vector) -> str:
    if "witness_key" in vector:
        return vector["witness_key"]
    # Published as a type-0x01 key: the same public key with the cosignature type byte.
    published = checkpoints.parse_verifier_key(vector["published_key"])
    raw = bytes([ALG_COSIGNATURE]) + published.public_key
    key_id = checkpoints.key_id(published.name, published.public_key, ALG_COSIGNATURE)
    return f"{published.name}+{key_id.hex()}+{base64.b64encode(raw).decode()}"


@pytest.mark.parametrize("vector", VECTORS["cosignatures"], ids=ids("cosignatures"))
def test_cosignatures_of_other_witnesses_verify(vector):
    key = _cosignature_key(vector)
    found = checkpoints.cosignatures(vector["note"], [key])
    assert found == {key: vector["timestamp"]}
    body = checkpoints.note_body(vector["note"])
    tampered = vector["note"].replace(
        body, body.replace("\n300\n", "\n301\n").replace("611", "612")
    )
    with pytest.raises(CheckpointError, match="does not verify"):
        checkpoints.cosignatures(tampered, [key])


def test_our_cosigner_reproduces_a_published_witness_cosignature_byte_for_byte():
    vector = next(v for v in VECTORS["cosignatures"] if "seed_preimage" in v)
    seed = hashlib.sha256(vector["seed_preimage"].encode()).digest()
    private, verifier = checkpoints.generate_signing_key(
        vector["witness_key"].split("+")[0], seed=seed, alg=ALG_COSIGNATURE
    )
    assert verifier == vector["witness_key"]
    public = Ed25519PrivateKey.from_private_bytes(seed).public_key()
    assert (
        public.public_bytes(Encoding.Raw, PublicFormat.Raw)
        == base64.b64decode(verifier.split("+", 2)[2])[1:]  # base64 may hold "+"
    )
    line = checkpoints.cosign(vector["note"], private, vector["timestamp"])
    assert line in vector["note"]

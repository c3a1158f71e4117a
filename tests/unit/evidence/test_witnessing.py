"""The log's side of C2SP tlog-witness: how a witness is configured and asked."""

import pytest

from audit import witnessing
from audit.evidence import checkpoints

_, WITNESS = checkpoints.generate_signing_key("w.example/1", alg=checkpoints.ALG_COSIGNATURE)


def test_a_witness_is_configured_as_its_verifier_key_at_its_url():
    witness = witnessing.Witness.parse(f" {WITNESS}@http://127.0.0.1:9/prefix/ ")
    assert (witness.name, witness.url) == ("w.example/1", "http://127.0.0.1:9/prefix")


@pytest.mark.parametrize(
    "spec",
    [
        "http://127.0.0.1:9",  # no key
        f"{WITNESS}@ftp://127.0.0.1:9",  # not HTTP
        checkpoints.generate_signing_key("log.example")[1] + "@http://127.0.0.1:9",  # a log key
    ],
)
def test_a_misconfigured_witness_is_refused(spec):
    with pytest.raises((ValueError, checkpoints.CheckpointError)):
        witnessing.Witness.parse(spec)


def test_the_request_body_is_old_size_proof_lines_an_empty_line_and_the_note():
    body = witnessing.request_body(3, [bytes(32), b"\xff" * 32], "origin\n4\nroot=\n\n— x y\n")
    assert body.decode() == (
        "old 3\nAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=\n"
        "//////////////////////////////////////////8=\n\norigin\n4\nroot=\n\n— x y\n"
    )


def test_a_witness_that_does_not_answer_is_an_answer_without_a_line():
    witness = witnessing.Witness.parse(f"{WITNESS}@http://127.0.0.1:9")
    answer = witnessing.ask(witness, "o\n1\nroot\n\n— o x\n", 0, lambda old: [], timeout=1)
    assert answer.line is None and answer.error

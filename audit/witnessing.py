"""Asking witnesses to cosign a checkpoint (the client side of C2SP tlog-witness).

Pure Python (standard library, audit.evidence.checkpoints and audit.evidence.merkle). The log hands
each witness
its new checkpoint with a consistency proof from the size the witness last cosigned; a witness
that says it last cosigned another size (409) is asked again once with a proof from there.
"""

from __future__ import annotations

import base64
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from audit.evidence import checkpoints

ProofFrom = Callable[[int], list[bytes] | None]  # old size -> consistency proof, None if none


@dataclass(frozen=True)
class Witness:
    verifier: str  # the witness's verifier key (type 0x04)
    url: str  # its submission prefix

    @classmethod
    def parse(cls, spec: str) -> Witness:
        """`VERIFIER_KEY@URL`, as PATHFINDER_WITNESSES lists them."""
        verifier, sep, url = spec.strip().partition("@")
        if not sep or not url.startswith(("http://", "https://")):
            raise ValueError(f"{spec!r} is not VERIFIER_KEY@URL")
        checkpoints.parse_verifier_key(verifier, alg=checkpoints.ALG_COSIGNATURE)
        return cls(verifier, url.rstrip("/"))

    @property
    def name(self) -> str:
        return self.verifier.split("+", 1)[0]


@dataclass(frozen=True)
class Answer:
    witness: Witness
    line: str | None  # the verified cosignature line, or None
    error: str = ""


def _post(url: str, body: bytes, timeout: float) -> tuple[int, str]:
    request = urllib.request.Request(
        url, data=body, method="POST", headers={"Content-Type": "text/plain"}
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310
            return response.status, response.read(64 * 1024).decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read(64 * 1024).decode("utf-8", "replace")


def request_body(old_size: int, proof: Sequence[bytes], note: str) -> bytes:
    lines = [f"old {old_size}", *(base64.b64encode(p).decode("ascii") for p in proof)]
    return ("\n".join(lines) + "\n\n" + note).encode("utf-8")


def ask(
    witness: Witness, note: str, old_size: int, proof_from: ProofFrom, *, timeout: float
) -> Answer:
    """One witness's cosignature of `note`, checked against its key; never raises."""
    try:
        for _ in range(2):
            proof = proof_from(old_size)
            if proof is None:
                return Answer(witness, None, f"no consistency proof from size {old_size}")
            status, text = _post(
                f"{witness.url}/add-checkpoint",
                request_body(old_size, proof, note),
                timeout,
            )
            if status == 409 and text.strip().isdigit():
                old_size = int(text.strip())  # it last cosigned another size: prove from there
                continue
            if status != 200:
                return Answer(witness, None, f"HTTP {status}: {text.strip()[:200]}")
            for line in text.splitlines():
                if not line.startswith(f"\u2014 {witness.name} "):
                    continue
                cosigned = checkpoints.with_signature_lines(note, [line])
                if checkpoints.cosignatures(cosigned, [witness.verifier]):
                    return Answer(witness, line + "\n")
            return Answer(witness, None, "the answer holds no cosignature by its key")
        return Answer(witness, None, f"it keeps answering 409 (last size {old_size})")
    except Exception as exc:  # a witness is outside our control: whatever it does, we go on
        return Answer(witness, None, f"{type(exc).__name__}: {exc}")

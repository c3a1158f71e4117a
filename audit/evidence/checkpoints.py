"""Signed checkpoints of the global log: C2SP tlog-checkpoint bodies in C2SP signed notes.

Pure Python (standard library plus `cryptography`), so an auditor can run it next to a bundle.

A checkpoint body is three lines, each ending in a newline (no extension lines):

    <origin>
    <tree size, decimal, no leading zeros>
    <standard base64 of the 32-byte root hash>

The signed note is the body, an empty line, and one signature line per signer:

    — <key name> <base64(4-byte key id || 64-byte Ed25519 signature over the body bytes)>

(an em dash U+2014 and a space first). key id = SHA-256(name || 0x0A || 0x01 || public key)[:4],
0x01 being the Ed25519 algorithm byte of the signed-note spec. Keys are written as Go's
golang.org/x/mod/sumdb/note package writes them:

    verifier key: <name>+<8 hex digits key id>+<base64(0x01 || 32-byte public key)>
    signing key:  PRIVATE+KEY+<name>+<8 hex digits key id>+<base64(0x01 || 32-byte seed)>

Verification is strict: every byte of the note must be exactly what `sign_checkpoint` writes
(canonical base64, no leading zeros, no extra or blank lines). Signature lines from other keys
(witness cosignatures) are allowed after ours if well formed; `parse_and_verify` does not check
them, `cosignatures` does.

Witness cosignatures are C2SP tlog-cosignature v1 (Ed25519): a signature line whose blob is
key id || 8-byte big-endian POSIX timestamp || Ed25519 signature over

    "cosignature/v1\n" "time <timestamp>\n" <the checkpoint body>

with key id = SHA-256(name || 0x0A || 0x04 || public key)[:4]. A witness's keys are written
like the log's, with the algorithm byte 0x04 in place of 0x01.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import re
import unicodedata
from dataclasses import dataclass

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

ALG_ED25519 = 0x01
ALG_COSIGNATURE = 0x04  # tlog-cosignature v1, Ed25519 with a timestamp
COSIGNATURE_HEADER = "cosignature/v1\n"
SIGNATURE_PREFIX = "\u2014 "  # em dash, space
ROOT_SIZE = 32
_MAX_SIGNATURES = 100
_SIZE_RE = re.compile(r"0|[1-9][0-9]*", re.ASCII)
_KEY_ID_RE = re.compile(r"[0-9a-f]{8}", re.ASCII)


class CheckpointError(ValueError):
    """A checkpoint, note or key that is malformed or does not verify."""


@dataclass(frozen=True)
class Checkpoint:
    origin: str
    size: int
    root: bytes


@dataclass(frozen=True)
class VerifierKey:
    name: str
    key_id: bytes
    public_key: bytes  # 32 raw Ed25519 bytes


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _b64_strict(text: str, what: str) -> bytes:
    """Decode standard base64, refusing anything that does not re-encode to the same text
    (non-alphabet characters, missing padding, non-zero padding bits)."""
    try:
        data = base64.b64decode(text.encode("ascii"), validate=True)
    except (UnicodeEncodeError, binascii.Error, ValueError) as exc:
        raise CheckpointError(f"{what} is not valid base64") from exc
    if _b64(data) != text:
        raise CheckpointError(f"{what} is not canonical base64")
    return data


def _check_key_name(name: object) -> str:
    if not isinstance(name, str) or not name:
        raise CheckpointError("key name is empty")
    for ch in name:
        if ch == "+" or ch.isspace() or unicodedata.category(ch).startswith("C"):
            raise CheckpointError(f"key name {name!r} contains {ch!r}")
    return name


def key_id(name: str, public_key: bytes, alg: int = ALG_ED25519) -> bytes:
    """The 4-byte signed-note key id of an Ed25519 key of algorithm `alg`."""
    return hashlib.sha256(name.encode("utf-8") + b"\n" + bytes([alg]) + public_key).digest()[:4]


def _raw_public(private: Ed25519PrivateKey) -> bytes:
    return private.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)


def _verifier_string(name: str, public_key: bytes, alg: int = ALG_ED25519) -> str:
    return f"{name}+{key_id(name, public_key, alg).hex()}+{_b64(bytes([alg]) + public_key)}"


def generate_signing_key(
    name: str, seed: bytes | None = None, *, alg: int = ALG_ED25519
) -> tuple[str, str]:
    """A new Ed25519 key: (private key string, verifier key string). `seed` (32 bytes) makes it
    deterministic, for test vectors; leave it out otherwise. `alg` ALG_COSIGNATURE makes a
    witness's key."""
    _check_key_name(name)
    if seed is None:
        seed = os.urandom(32)
    if len(seed) != 32:
        raise ValueError("an Ed25519 seed is 32 bytes")
    public = _raw_public(Ed25519PrivateKey.from_private_bytes(seed))
    kid = key_id(name, public, alg).hex()
    private_str = f"PRIVATE+KEY+{name}+{kid}+{_b64(bytes([alg]) + seed)}"
    return private_str, _verifier_string(name, public, alg)


def _parse_signer(
    signer_key_str: str, alg: int = ALG_ED25519
) -> tuple[str, bytes, Ed25519PrivateKey]:
    parts = signer_key_str.split("+", 4) if isinstance(signer_key_str, str) else []
    if len(parts) != 5 or parts[0] != "PRIVATE" or parts[1] != "KEY":
        raise CheckpointError("signing key is not of the form PRIVATE+KEY+<name>+<id>+<key>")
    name = _check_key_name(parts[2])
    if not _KEY_ID_RE.fullmatch(parts[3]):
        raise CheckpointError("signing key id is not 8 lowercase hex digits")
    raw = _b64_strict(parts[4], "signing key")
    if len(raw) != 33 or raw[0] != alg:
        raise CheckpointError(f"signing key is not an Ed25519 key of type {alg:#04x}")
    private = Ed25519PrivateKey.from_private_bytes(raw[1:])
    kid = key_id(name, _raw_public(private), alg)
    if kid.hex() != parts[3]:
        raise CheckpointError("signing key id does not match its name and key")
    return name, kid, private


def verifier_key_for(signer_key_str: str, *, alg: int = ALG_ED25519) -> str:
    """The verifier key string that goes with a signing key string."""
    name, _, private = _parse_signer(signer_key_str, alg)
    return _verifier_string(name, _raw_public(private), alg)


def parse_verifier_key(verifier_key_str: str, *, alg: int = ALG_ED25519) -> VerifierKey:
    parts = verifier_key_str.split("+", 2) if isinstance(verifier_key_str, str) else []
    if len(parts) != 3:
        raise CheckpointError("verifier key is not of the form <name>+<id>+<key>")
    name = _check_key_name(parts[0])
    if not _KEY_ID_RE.fullmatch(parts[1]):
        raise CheckpointError("verifier key id is not 8 lowercase hex digits")
    raw = _b64_strict(parts[2], "verifier key")
    if len(raw) != 33 or raw[0] != alg:
        raise CheckpointError(f"verifier key is not an Ed25519 key of type {alg:#04x}")
    public = raw[1:]
    kid = key_id(name, public, alg)
    if kid.hex() != parts[1]:
        raise CheckpointError("verifier key id does not match its name and key")
    try:
        Ed25519PublicKey.from_public_bytes(public)
    except ValueError as exc:
        raise CheckpointError("verifier key is not a valid Ed25519 public key") from exc
    return VerifierKey(name=name, key_id=kid, public_key=public)


def line_of_key(words: list[str], verifier_key_str: str) -> bool:
    """Whether a note's signature line (its words after "— ": name, base64 signature) names the
    key `verifier_key_str` by its name and key id (whether it verifies is the signature check's);
    False for an unreadable line."""
    key = verifier_key_str.split("+", 2)
    if len(words) != 2 or len(key) != 3 or words[0] != key[0]:
        return False
    try:
        return base64.b64decode(words[1], validate=True)[:4].hex() == key[1]
    except (ValueError, binascii.Error):
        return False


def _check_origin(origin: object) -> str:
    if not isinstance(origin, str) or not origin:
        raise CheckpointError("checkpoint origin is empty")
    if origin != origin.strip() or any(unicodedata.category(c).startswith("C") for c in origin):
        raise CheckpointError("checkpoint origin has surrounding spaces or control characters")
    return origin


def checkpoint_body(origin: str, size: int, root: bytes) -> str:
    _check_origin(origin)
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise CheckpointError("tree size must be a non-negative integer")
    if not isinstance(root, (bytes, bytearray)) or len(root) != ROOT_SIZE:
        raise CheckpointError("root must be 32 bytes")
    return f"{origin}\n{size}\n{_b64(bytes(root))}\n"


def sign_checkpoint(origin: str, size: int, root: bytes, signer_key_str: str) -> str:
    """The signed note text of the checkpoint (origin, size, root)."""
    name, kid, private = _parse_signer(signer_key_str)
    body = checkpoint_body(origin, size, root)
    signature = private.sign(body.encode("utf-8"))
    return f"{body}\n{SIGNATURE_PREFIX}{name} {_b64(kid + signature)}\n"


def _parse_body(body: str) -> Checkpoint:
    lines = body.split("\n")
    if len(lines) != 4 or lines[3] != "":
        raise CheckpointError(
            "checkpoint body must be exactly three lines (origin, size, root); got "
            f"{len(lines) - 1}"
        )
    origin, size_text, root_text = lines[:3]
    _check_origin(origin)
    if not _SIZE_RE.fullmatch(size_text):
        raise CheckpointError(f"tree size {size_text!r} is not a decimal without leading zeros")
    root = _b64_strict(root_text, "root hash")
    if len(root) != ROOT_SIZE:
        raise CheckpointError(f"root hash is {len(root)} bytes, not {ROOT_SIZE}")
    return Checkpoint(origin=origin, size=int(size_text), root=root)


def _split_note(note_text: str | bytes) -> tuple[str, str]:
    """(body, signature block) of a note, after the checks that do not need a key."""
    if isinstance(note_text, (bytes, bytearray)):
        try:
            note_text = bytes(note_text).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise CheckpointError("note is not valid UTF-8") from exc
    if not isinstance(note_text, str):
        raise CheckpointError("note must be text")
    for ch in note_text:
        if ch != "\n" and unicodedata.category(ch) in ("Cc", "Cs"):
            raise CheckpointError(f"note contains the control character {ch!r}")
    if not note_text.endswith("\n"):
        raise CheckpointError("note does not end with a newline")
    split = note_text.rfind("\n\n")
    if split < 0:
        raise CheckpointError("note has no signature block (no empty line after the body)")
    body, sig_block = note_text[: split + 1], note_text[split + 2 :]
    if not sig_block:
        raise CheckpointError("note has no signature lines after the empty line")
    return body, sig_block


def parse_unverified(note_text: str | bytes) -> Checkpoint:
    """The checkpoint a note claims, WITHOUT checking any signature (for diagnostics only)."""
    return _parse_body(_split_note(note_text)[0])


def parse_and_verify(note_text: str | bytes, verifier_key_str: str) -> Checkpoint:
    """Parse a signed checkpoint note and verify its signature by `verifier_key_str`.

    Raises CheckpointError naming the problem: malformed note, body or key, no signature by this
    key (wrong name or key id), a signature that does not verify, trailing garbage.
    """
    key = parse_verifier_key(verifier_key_str)
    body, _ = _split_note(note_text)
    checkpoint = _parse_body(body)
    _verify_signature(note_text, body, key)
    return checkpoint


def verify_signed_note(note_text: str | bytes, verifier_key_str: str) -> str:
    """The text of any C2SP signed note (not only a checkpoint) signed by this key."""
    key = parse_verifier_key(verifier_key_str)
    body, _ = _split_note(note_text)
    _verify_signature(note_text, body, key)
    return body


def _verify_signature(note_text: str | bytes, body: str, key: VerifierKey) -> None:
    verified = False
    for name, blob in _signature_lines(note_text):
        if name != key.name or blob[:4] != key.key_id:
            continue  # another signer's (e.g. a witness cosignature); not ours to check
        if len(blob) != 4 + 64:
            raise CheckpointError(f"signature by {key.name} is not 64 bytes")
        try:
            Ed25519PublicKey.from_public_bytes(key.public_key).verify(
                blob[4:], body.encode("utf-8")
            )
        except InvalidSignature as exc:
            raise CheckpointError(
                f"signature by {key.name}+{key.key_id.hex()} does not verify: the checkpoint "
                "was altered or signed by another key"
            ) from exc
        verified = True
    if not verified:
        raise CheckpointError(
            f"note has no signature by the key {key.name}+{key.key_id.hex()} "
            "(wrong key name or key id)"
        )


# ---------------------------------------------------------------------------------------------
# Witness cosignatures (C2SP tlog-cosignature v1, Ed25519)


def note_body(note_text: str) -> str:
    """The checkpoint body of a note (its lines up to the empty line), after the checks that do
    not need a key."""
    body, _ = _split_note(note_text)
    _parse_body(body)
    return body


def _signature_lines(note_text: str) -> list[tuple[str, bytes]]:
    """(key name, signature blob) of every signature line, each checked for form."""
    _, sig_block = _split_note(note_text)
    lines = sig_block[:-1].split("\n")
    if len(lines) > _MAX_SIGNATURES:
        raise CheckpointError("note has too many signature lines")
    parsed = []
    for number, line in enumerate(lines, start=1):
        if not line.startswith(SIGNATURE_PREFIX):
            raise CheckpointError(f"signature line {number} does not start with '\u2014 '")
        fields = line[len(SIGNATURE_PREFIX) :].split(" ")
        if len(fields) != 2:
            raise CheckpointError(f"signature line {number} is not '\u2014 <name> <signature>'")
        name = _check_key_name(fields[0])
        blob = _b64_strict(fields[1], f"signature on line {number}")
        if len(blob) < 5:
            raise CheckpointError(f"signature on line {number} is too short")
        parsed.append((name, blob))
    return parsed


def _cosigned_message(body: str, timestamp: int) -> bytes:
    return f"{COSIGNATURE_HEADER}time {timestamp}\n{body}".encode()


def cosign(note_text: str, witness_key_str: str, timestamp: int) -> str:
    """A witness's cosignature line (with its newline) over the note's checkpoint body."""
    if not isinstance(timestamp, int) or not 0 < timestamp < 2**63:
        raise CheckpointError("a cosignature timestamp is a POSIX time in 1..2^63-1")
    name, kid, private = _parse_signer(witness_key_str, ALG_COSIGNATURE)
    signature = private.sign(_cosigned_message(note_body(note_text), timestamp))
    blob = kid + timestamp.to_bytes(8, "big") + signature
    return f"{SIGNATURE_PREFIX}{name} {_b64(blob)}\n"


def cosignatures(note_text: str, witness_key_strs) -> dict[str, int]:
    """The pinned witnesses that cosigned the note: verifier key string -> cosignature time.

    A line that names a pinned witness (name and key id) but does not verify, or is not 76
    bytes, is an error (a malformed note, as the spec says); lines of other keys are ignored.
    """
    body = note_body(note_text)
    lines = _signature_lines(note_text)
    found: dict[str, int] = {}
    for key_str in witness_key_strs:
        key = parse_verifier_key(key_str, alg=ALG_COSIGNATURE)
        for name, blob in lines:
            if name != key.name or blob[:4] != key.key_id:
                continue
            if len(blob) != 4 + 8 + 64:
                raise CheckpointError(f"cosignature by {key.name} is not 76 bytes")
            timestamp = int.from_bytes(blob[4:12], "big")
            if not 0 < timestamp < 2**63:
                raise CheckpointError(f"cosignature by {key.name} has no valid timestamp")
            try:
                Ed25519PublicKey.from_public_bytes(key.public_key).verify(
                    blob[12:], _cosigned_message(body, timestamp)
                )
            except InvalidSignature as exc:
                raise CheckpointError(
                    f"cosignature by {key.name}+{key.key_id.hex()} does not verify"
                ) from exc
            found[key_str] = timestamp
    return found


def with_signature_lines(note_text: str, lines) -> str:
    """The note with these signature lines added after its own (each once)."""
    _split_note(note_text)
    present = set(note_text.split("\n"))
    added = [line for line in lines if line.rstrip("\n") not in present]
    return note_text + "".join(line if line.endswith("\n") else line + "\n" for line in added)

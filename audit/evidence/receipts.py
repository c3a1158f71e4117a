"""RFC 9942 COSE Receipts of inclusion in the global log (verifiable data structure
RFC9162_SHA256), signed with the log's checkpoint key.

Pure Python (standard library plus `cryptography`), so an auditor can run it next to a bundle:
the little CBOR it needs is written here (deterministic encoding, RFC 8949 §4.2.1) rather than
taken from a CBOR package the examiner's wheel does not depend on.

A receipt is a tagged COSE_Sign1 (RFC 9052) whose payload is detached: the Merkle root that the
leaf and the inclusion path fold to.

    18([
      << {1: -8, 4: kid, 15: {1: iss, 2: sub}, 395: 1} >>,   protected: alg EdDSA, key id,
                                                               CWT claims (optional), vds
      {396: {-1: [<< [tree_size, leaf_index, [path...]] >>]}},  unprotected: one inclusion proof
      nil,                                                      payload: detached (the root)
      signature                                                 Ed25519, 64 bytes
    ])

The signature is over the Sig_structure ["Signature1", protected bytes, h'', root]. The key id
is the 4-byte signed-note key id of the log key (SHA-256(name || 0x0A || 0x01 || public
key)[:4], the 8 hex digits of the verifier key an examiner pins), `iss` the checkpoint's origin
and `sub` the trail id. The path is RFC 9162's audit path (bottom-up), as
audit.evidence.merkle writes it; a tree of one leaf has an empty path (which RFC 9942's CDDL,
`[ + bstr ]`, does not allow, but which every verifier tried accepts: ADR 0030).

`receipt_problems` is strict: every byte must be what `encode_receipt` writes (minimal heads,
definite lengths, map keys in deterministic order, no other header).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from audit.evidence import checkpoints, merkle

COSE_SIGN1_TAG = 18
HEADER_ALG = 1
HEADER_CRIT = 2
HEADER_KID = 4
HEADER_CWT_CLAIMS = 15  # RFC 9597
HEADER_VDS = 395  # RFC 9942: verifiable data structure
HEADER_VDP = 396  # RFC 9942: verifiable data structure proofs
ALG_EDDSA = -8  # RFC 9053; RFC 9864's fully specified Ed25519 (-19) is not what verifiers know
ALG_ED25519 = -19
VDS_RFC9162_SHA256 = 1
VDP_INCLUSION_PROOFS = -1
CWT_ISS = 1
CWT_SUB = 2
KID_SIZE = 4
SIGNATURE_SIZE = 64

_MAX_DEPTH = 8
_MAX_PATH = 64  # a tree of 2^64 leaves has an audit path of at most 64 hashes


class ReceiptError(ValueError):
    """A receipt, or CBOR, that is malformed or is not what encode_receipt writes."""


# ---------------------------------------------------------------------------------------------
# Deterministic CBOR (RFC 8949 §4.2.1): the subset a receipt uses


@dataclass(frozen=True)
class CborTag:
    tag: int
    value: object


def _head(major: int, argument: int) -> bytes:
    if argument < 24:
        return bytes([major << 5 | argument])
    for info, size in ((24, 1), (25, 2), (26, 4), (27, 8)):
        if argument < 1 << (8 * size):
            return bytes([major << 5 | info]) + argument.to_bytes(size, "big")
    raise ValueError(f"{argument} does not fit in a CBOR head")


def cbor_encode(value: object) -> bytes:
    """The deterministic CBOR of an int, bytes, str, list, dict, None or CborTag: shortest
    heads, definite lengths, map keys ordered by their encodings."""
    if isinstance(value, bool):
        raise TypeError("booleans are not used in a receipt")
    if isinstance(value, int):
        return _head(0, value) if value >= 0 else _head(1, -1 - value)
    if isinstance(value, (bytes, bytearray)):
        return _head(2, len(value)) + bytes(value)
    if isinstance(value, str):
        data = value.encode("utf-8")
        return _head(3, len(data)) + data
    if isinstance(value, (list, tuple)):
        return _head(4, len(value)) + b"".join(cbor_encode(item) for item in value)
    if isinstance(value, dict):
        pairs = sorted((cbor_encode(k), cbor_encode(v)) for k, v in value.items())
        if len({k for k, _ in pairs}) != len(pairs):
            raise ValueError("a CBOR map has two equal keys")
        return _head(5, len(pairs)) + b"".join(k + v for k, v in pairs)
    if value is None:
        return b"\xf6"
    if isinstance(value, CborTag):
        return _head(6, value.tag) + cbor_encode(value.value)
    raise TypeError(f"{type(value).__name__} is not used in a receipt")


def cbor_decode(data: bytes) -> object:
    """The value of `data`, which must be exactly one deterministic CBOR item of the kinds
    cbor_encode writes; ReceiptError otherwise."""
    data = bytes(data)
    value, end = _item(data, 0, 0)
    if end != len(data):
        raise ReceiptError(f"{len(data) - end} bytes after the CBOR item")
    return value


def _argument(data: bytes, at: int) -> tuple[int, int, int]:
    """(major type, argument, offset after the head)."""
    if at >= len(data):
        raise ReceiptError("CBOR ends early")
    major, info = data[at] >> 5, data[at] & 0x1F
    if info < 24:
        return major, info, at + 1
    if info > 27:
        raise ReceiptError("indefinite lengths and reserved CBOR heads are not used in a receipt")
    size = 1 << (info - 24)
    if at + 1 + size > len(data):
        raise ReceiptError("CBOR ends early")
    argument = int.from_bytes(data[at + 1 : at + 1 + size], "big")
    if argument < (24 if size == 1 else 1 << (4 * size)):
        raise ReceiptError("a CBOR head is not in its shortest form")
    return major, argument, at + 1 + size


def _item(data: bytes, at: int, depth: int) -> tuple[object, int]:
    if depth > _MAX_DEPTH:
        raise ReceiptError("CBOR nested too deeply")
    start = at
    major, argument, at = _argument(data, at)
    if major == 0:
        return argument, at
    if major == 1:
        return -1 - argument, at
    if major in (2, 3):
        if argument > len(data) - at:
            raise ReceiptError("CBOR ends early")
        raw = data[at : at + argument]
        if major == 2:
            return raw, at + argument
        try:
            return raw.decode("utf-8"), at + argument
        except UnicodeDecodeError as exc:
            raise ReceiptError("a CBOR text string is not UTF-8") from exc
    if major == 4:
        if argument > len(data) - at:
            raise ReceiptError("CBOR ends early")
        items = []
        for _ in range(argument):
            item, at = _item(data, at, depth + 1)
            items.append(item)
        return items, at
    if major == 5:
        if argument > len(data) - at:
            raise ReceiptError("CBOR ends early")
        found: dict = {}
        previous = b""
        for _ in range(argument):
            key_at = at
            key, at = _item(data, at, depth + 1)
            if not isinstance(key, (int, str)):
                raise ReceiptError("a CBOR map key is not an integer or a text string")
            encoded = data[key_at:at]
            if previous and encoded <= previous:
                raise ReceiptError("CBOR map keys are repeated or not in deterministic order")
            previous = encoded
            found[key], at = _item(data, at, depth + 1)
        return found, at
    if major == 6:
        value, at = _item(data, at, depth + 1)
        return CborTag(argument, value), at
    if data[start] == 0xF6:
        return None, at
    raise ReceiptError("floats and simple values other than null are not used in a receipt")


# ---------------------------------------------------------------------------------------------
# Keys


def signer_for_note_key(signer_key_str: str) -> tuple[bytes, Ed25519PrivateKey]:
    """(4-byte key id, private key) of a signed-note private key string (PRIVATE+KEY+...): the
    log's checkpoint key signs receipts too. CheckpointError when it is not one."""
    _, kid, private = checkpoints._parse_signer(signer_key_str)
    return kid, private


def key_for_verifier(verifier_key_str: str) -> tuple[bytes, Ed25519PublicKey]:
    """(4-byte key id, public key) of the verifier key string an examiner pins
    (<name>+<key id>+<base64(0x01 || key)>): what receipt_problems checks a receipt with."""
    key = checkpoints.parse_verifier_key(verifier_key_str)
    return key.key_id, Ed25519PublicKey.from_public_bytes(key.public_key)


# ---------------------------------------------------------------------------------------------
# Receipts


@dataclass(frozen=True)
class Receipt:
    """What a receipt states, read without checking anything but its form."""

    kid: bytes
    tree_size: int
    leaf_index: int
    path: tuple[bytes, ...]
    issuer: str | None
    subject: str | None
    protected: bytes  # the protected header's bytes, as signed
    signature: bytes


def _path_length(index: int, size: int) -> int:
    """The number of hashes in the audit path of leaf `index` of a tree of `size` leaves."""
    length = 0
    while size > 1:
        k = 1 << ((size - 1).bit_length() - 1)
        index, size = (index, k) if index < k else (index - k, size - k)
        length += 1
    return length


def _sig_structure(protected: bytes, root: bytes) -> bytes:
    return cbor_encode(["Signature1", protected, b"", root])  # RFC 9052 §4.4


def encode_receipt(
    *,
    private_key: Ed25519PrivateKey,
    kid: bytes,
    tree_size: int,
    leaf_index: int,
    proof: Sequence[bytes],
    root: bytes,
    issuer: str | None = None,
    subject: str | None = None,
) -> bytes:
    """The receipt (tagged COSE_Sign1 bytes) that leaf `leaf_index` of the tree of `tree_size`
    leaves whose root is `root` has the audit path `proof`. `issuer` and `subject` become the
    CWT claims iss and sub (both left out when neither is given). The same inputs give the same
    bytes (Ed25519 signatures are deterministic)."""
    protected = receipt_protected(kid=kid, issuer=issuer, subject=subject)
    return assemble_receipt(
        protected=protected,
        signature=sign_root(private_key, protected, root),
        tree_size=tree_size,
        leaf_index=leaf_index,
        proof=proof,
    )


def receipt_protected(
    *, kid: bytes, issuer: str | None = None, subject: str | None = None
) -> bytes:
    """The protected header's bytes: alg, kid, the CWT claims given, vds."""
    if not isinstance(kid, (bytes, bytearray)) or len(kid) != KID_SIZE:
        raise ValueError(f"kid must be the {KID_SIZE}-byte signed-note key id")
    protected_map: dict = {HEADER_ALG: ALG_EDDSA, HEADER_KID: bytes(kid)}
    claims = {}
    for label, claim in ((CWT_ISS, issuer), (CWT_SUB, subject)):
        if claim is not None:
            if not isinstance(claim, str) or not claim:
                raise ValueError("issuer and subject must be non-empty strings")
            claims[label] = claim
    if claims:
        protected_map[HEADER_CWT_CLAIMS] = claims
    protected_map[HEADER_VDS] = VDS_RFC9162_SHA256
    return cbor_encode(protected_map)


def sign_root(private_key: Ed25519PrivateKey, protected: bytes, root: bytes) -> bytes:
    """The signature over a root under a protected header: without a subject, the same for
    every leaf of the tree, so the log signs it once per checkpoint (audit.log)."""
    if not isinstance(root, (bytes, bytearray)) or len(root) != merkle.HASH_SIZE:
        raise ValueError("root must be 32 bytes")
    return private_key.sign(_sig_structure(protected, bytes(root)))


def checkpoint_signature(signer_key_str: str, origin: str, root: bytes) -> bytes:
    """What a checkpoint keeps for its receipts: the log key's signature of the root under the
    header naming that key (kid) and the log (iss, its origin). Every receipt under the
    checkpoint is this signature with one leaf's audit path (assemble_receipt)."""
    kid, private = signer_for_note_key(signer_key_str)
    return sign_root(private, receipt_protected(kid=kid, issuer=origin), root)


def assemble_receipt(
    *, protected: bytes, signature: bytes, tree_size: int, leaf_index: int, proof: Sequence[bytes]
) -> bytes:
    """The receipt of one leaf: the signed root's header and signature, and the leaf's audit
    path in the unprotected header (the path is not signed: it folds to the signed root)."""
    for name, number in (("tree_size", tree_size), ("leaf_index", leaf_index)):
        if not isinstance(number, int) or isinstance(number, bool) or not 0 <= number < 1 << 64:
            raise ValueError(f"{name} must be an integer in 0..2^64-1")
    if not leaf_index < tree_size:
        raise ValueError(f"leaf index {leaf_index} is outside a tree of size {tree_size}")
    path = [bytes(p) for p in proof]
    if any(len(p) != merkle.HASH_SIZE for p in path):
        raise ValueError("every hash of the audit path must be 32 bytes")
    if len(path) != _path_length(leaf_index, tree_size):
        raise ValueError(
            f"leaf {leaf_index} of {tree_size} has an audit path of "
            f"{_path_length(leaf_index, tree_size)} hashes, not {len(path)}"
        )
    inclusion = cbor_encode([tree_size, leaf_index, path])
    unprotected = {HEADER_VDP: {VDP_INCLUSION_PROOFS: [inclusion]}}
    return cbor_encode(CborTag(COSE_SIGN1_TAG, [protected, unprotected, None, bytes(signature)]))


def _map_problems(value: object, allowed: set[int], what: str) -> list[str]:
    if not isinstance(value, dict):
        return [f"{what} is not a CBOR map"]
    extra = sorted(set(value) - allowed, key=str)
    if extra:
        return [f"{what} holds labels Pathfinder does not write: {', '.join(map(str, extra))}"]
    return []


def decode_receipt(receipt: bytes) -> Receipt:
    """What a receipt states, after every check of its form (not of its proof or signature);
    ReceiptError naming the first problem."""
    if not isinstance(receipt, (bytes, bytearray)):
        raise ReceiptError("a receipt is bytes")
    outer = cbor_decode(receipt)
    if not isinstance(outer, CborTag) or outer.tag != COSE_SIGN1_TAG:
        raise ReceiptError("not a tagged COSE_Sign1 message (CBOR tag 18)")
    if not isinstance(outer.value, list) or len(outer.value) != 4:
        raise ReceiptError("a COSE_Sign1 message is an array of 4")
    protected, unprotected, payload, signature = outer.value
    if not isinstance(protected, bytes):
        raise ReceiptError("the protected header is not a byte string")
    try:
        header = cbor_decode(protected)
    except ReceiptError as exc:
        raise ReceiptError(f"the protected header: {exc}") from exc
    problems = _map_problems(
        header, {HEADER_ALG, HEADER_KID, HEADER_CWT_CLAIMS, HEADER_VDS}, "the protected header"
    )
    if problems:
        raise ReceiptError(problems[0])
    alg = header.get(HEADER_ALG)
    if alg != ALG_EDDSA:
        hint = " (RFC 9864's Ed25519; receipts use EdDSA, -8)" if alg == ALG_ED25519 else ""
        raise ReceiptError(f"alg is {alg!r}{hint}, not EdDSA (-8)")
    kid = header.get(HEADER_KID)
    if not isinstance(kid, bytes) or len(kid) != KID_SIZE:
        raise ReceiptError(f"kid is not the {KID_SIZE}-byte signed-note key id of the log key")
    if header.get(HEADER_VDS) != VDS_RFC9162_SHA256:
        raise ReceiptError("vds (label 395) is not RFC9162_SHA256 (1)")
    claims = header.get(HEADER_CWT_CLAIMS, {})
    problems = _map_problems(claims, {CWT_ISS, CWT_SUB}, "the CWT claims (label 15)")
    if problems or (HEADER_CWT_CLAIMS in header and not claims):
        raise ReceiptError(problems[0] if problems else "the CWT claims (label 15) are empty")
    if not all(isinstance(c, str) and c for c in claims.values()):
        raise ReceiptError("iss and sub must be non-empty text strings")
    if not isinstance(unprotected, dict) or set(unprotected) != {HEADER_VDP}:
        raise ReceiptError("the unprotected header must hold exactly vdp (label 396)")
    vdp = unprotected[HEADER_VDP]
    if not isinstance(vdp, dict) or set(vdp) != {VDP_INCLUSION_PROOFS}:
        raise ReceiptError("vdp must hold exactly inclusion proofs (label -1)")
    proofs = vdp[VDP_INCLUSION_PROOFS]
    if not isinstance(proofs, list) or len(proofs) != 1 or not isinstance(proofs[0], bytes):
        raise ReceiptError("vdp must hold exactly one inclusion proof, a byte string")
    if payload is not None:
        raise ReceiptError("the payload is attached; a receipt's payload (the root) is detached")
    if not isinstance(signature, bytes) or len(signature) != SIGNATURE_SIZE:
        raise ReceiptError(f"the signature is not {SIGNATURE_SIZE} bytes")
    try:
        inclusion = cbor_decode(proofs[0])
    except ReceiptError as exc:
        raise ReceiptError(f"the inclusion proof: {exc}") from exc
    if not (isinstance(inclusion, list) and len(inclusion) == 3):
        raise ReceiptError("the inclusion proof is not [tree_size, leaf_index, path]")
    tree_size, leaf_index, path = inclusion
    if not (isinstance(tree_size, int) and isinstance(leaf_index, int) and tree_size >= 0):
        raise ReceiptError("tree_size and leaf_index must be unsigned integers")
    if not 0 <= leaf_index < tree_size:
        raise ReceiptError(f"leaf index {leaf_index} is outside a tree of size {tree_size}")
    if not isinstance(path, list) or len(path) > _MAX_PATH:
        raise ReceiptError("the audit path is not an array of at most 64 hashes")
    if not all(isinstance(p, bytes) and len(p) == merkle.HASH_SIZE for p in path):
        raise ReceiptError("every hash of the audit path must be a 32-byte string")
    return Receipt(
        kid=kid,
        tree_size=tree_size,
        leaf_index=leaf_index,
        path=tuple(path),
        issuer=claims.get(CWT_ISS),
        subject=claims.get(CWT_SUB),
        protected=protected,
        signature=signature,
    )


def root_from_path(
    leaf: bytes, leaf_index: int, tree_size: int, path: Sequence[bytes]
) -> bytes | None:
    """The root that the leaf DATA `leaf` (hashed here as 0x00 || leaf) and its audit path fold
    to, by RFC 9162 §2.1.3.2; None when the path has the wrong length for (index, size)."""
    if not 0 <= leaf_index < tree_size or len(path) != _path_length(leaf_index, tree_size):
        return None
    fn, sn = leaf_index, tree_size - 1
    r = merkle.leaf_hash(leaf)
    for p in path:
        if sn == 0:
            return None
        if fn & 1 or fn == sn:
            r = merkle.node_hash(bytes(p), r)
            while not fn & 1 and fn != 0:
                fn >>= 1
                sn >>= 1
        else:
            r = merkle.node_hash(r, bytes(p))
        fn >>= 1
        sn >>= 1
    return r if sn == 0 else None


def _shown(value: object) -> str:
    return value.hex() if isinstance(value, bytes) else repr(value)


def receipt_problems(
    receipt: bytes,
    *,
    leaf: bytes,
    public_key: Ed25519PublicKey,
    root: bytes | None = None,
    tree_size: int | None = None,
    leaf_index: int | None = None,
    kid: bytes | None = None,
    issuer: str | None = None,
    subject: str | None = None,
) -> list[str]:
    """What is wrong with `receipt` as a receipt of the leaf DATA `leaf` (a ledger payload's
    UTF-8 bytes, not its hash) signed by `public_key`: [] when it is valid.

    The signature covers the root the leaf and path fold to, not the tree size and leaf index
    (they are in the unprotected header, as RFC 9942 has them): pass the published checkpoint's
    `root` and `tree_size`, and the ledger leaf's `leaf_index`, to hold the receipt to them.
    Given, `kid`, `issuer` and `subject` must be what the receipt states too."""
    try:
        stated = decode_receipt(receipt)
    except ReceiptError as exc:
        return [f"receipt malformed: {exc}"]
    problems = []
    for name, want, got in (
        ("tree size", tree_size, stated.tree_size),
        ("leaf index", leaf_index, stated.leaf_index),
        ("kid", kid, stated.kid),
        ("iss", issuer, stated.issuer),
        ("sub", subject, stated.subject),
    ):
        if want is not None and want != got:
            problems.append(f"receipt {name} is {_shown(got)}, not {_shown(want)}")
    computed = root_from_path(bytes(leaf), stated.leaf_index, stated.tree_size, stated.path)
    if computed is None:
        problems.append(
            f"receipt audit path has {len(stated.path)} hashes; leaf {stated.leaf_index} of a "
            f"tree of {stated.tree_size} needs {_path_length(stated.leaf_index, stated.tree_size)}"
        )
        return problems
    try:
        public_key.verify(stated.signature, _sig_structure(stated.protected, computed))
    except InvalidSignature:
        problems.append(
            f"receipt signature does not verify over the root {computed.hex()} that this leaf "
            f"and path fold to: another leaf, an altered path, or another key"
        )
    if root is not None and computed != bytes(root):
        problems.append(
            f"receipt proves the root {computed.hex()} for {stated.tree_size} leaves, not the "
            f"checkpoint's {bytes(root).hex()}"
        )
    return problems

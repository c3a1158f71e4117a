"""The shape and imprint of an RFC 3161 timestamp response, read with nothing but the standard
library.

Without the authority's certificate a verifier cannot check a timestamp's signature, but it can
refuse bytes that are no timestamp at all, and a timestamp of another document: a bundle's
`checkpoint.tsr` is either empty or one DER TimeStampResp (RFC 3161 §2.4.2) whose status is
granted, whose token is CMS SignedData, and whose TSTInfo's messageImprint is the SHA-256 of
`checkpoint.txt`.
"""

from __future__ import annotations

SEQUENCE, INTEGER, OID, OCTET_STRING, SET = 0x30, 0x02, 0x06, 0x04, 0x31
EXPLICIT_0 = 0xA0
SIGNED_DATA_OID = bytes.fromhex("2a864886f70d010702")  # 1.2.840.113549.1.7.2
TST_INFO_OID = bytes.fromhex("2a864886f70d0109100104")  # 1.2.840.113549.1.9.16.1.4
SHA256_OID = bytes.fromhex("608648016503040201")  # 2.16.840.1.101.3.4.2.1
GRANTED = (b"\x00", b"\x01")  # granted, grantedWithMods, as minimal DER INTEGERs


class NotDer(ValueError):
    pass


def read_tlv(data: bytes, at: int) -> tuple[int, bytes, int]:
    """(tag, value, end) of the DER element at `at`: definite, minimal lengths only."""
    if at + 2 > len(data):
        raise NotDer("truncated")
    tag, first = data[at], data[at + 1]
    at += 2
    if first < 0x80:
        length = first
    else:
        count = first & 0x7F
        if count == 0 or count > 4 or at + count > len(data):
            raise NotDer("an indefinite or oversized length")
        length = int.from_bytes(data[at : at + count], "big")
        if length < 0x80 or data[at] == 0:
            raise NotDer("a length not in its shortest form")
        at += count
    if at + length > len(data):
        raise NotDer("a length past the end")
    return tag, data[at : at + length], at + length


def timestamp_response_failure(data: bytes) -> str | None:
    """Why `data` is not a granted RFC 3161 TimeStampResp, or None when its shape is one."""
    try:
        tag, body, end = read_tlv(data, 0)
        if tag != SEQUENCE or end != len(data):
            return "not one DER SEQUENCE"
        tag, status, after = read_tlv(body, 0)
        if tag != SEQUENCE:
            return "no PKIStatusInfo"
        tag, value, _ = read_tlv(status, 0)
        if tag != INTEGER or value not in GRANTED:
            return "its status is not granted"
        tag, token, _ = read_tlv(body, after)
        if tag != SEQUENCE:
            return "no timeStampToken"
        tag, oid, _ = read_tlv(token, 0)
        if tag != OID or oid != SIGNED_DATA_OID:
            return "its token is not CMS SignedData"
    except NotDer as exc:
        return f"not DER ({exc})"
    return None


def timestamp_imprint(data: bytes) -> bytes:
    """The SHA-256 digest a granted TimeStampResp's TSTInfo stamps (its messageImprint); NotDer
    when `data` is no such response, or it stamps with another hash."""
    failure = timestamp_response_failure(data)
    if failure is not None:
        raise NotDer(failure)
    _, body, _ = read_tlv(data, 0)
    _, _, after = read_tlv(body, 0)  # PKIStatusInfo
    _, token, _ = read_tlv(body, after)  # ContentInfo
    _, _, after = read_tlv(token, 0)  # contentType
    tag, explicit, _ = read_tlv(token, after)
    if tag != EXPLICIT_0:
        raise NotDer("the token holds no SignedData")
    tag, signed, _ = read_tlv(explicit, 0)
    if tag != SEQUENCE:
        raise NotDer("SignedData is not a SEQUENCE")
    _, _, after = read_tlv(signed, 0)  # version
    tag, _, after = read_tlv(signed, after)  # digestAlgorithms
    if tag != SET:
        raise NotDer("SignedData has no digestAlgorithms")
    tag, content, _ = read_tlv(signed, after)  # encapContentInfo
    if tag != SEQUENCE:
        raise NotDer("SignedData has no encapContentInfo")
    tag, oid, after = read_tlv(content, 0)
    if tag != OID or oid != TST_INFO_OID:
        raise NotDer("the token's content is not a TSTInfo")
    tag, explicit, _ = read_tlv(content, after)
    if tag != EXPLICIT_0:
        raise NotDer("the TSTInfo is missing")
    tag, octets, _ = read_tlv(explicit, 0)
    if tag != OCTET_STRING:
        raise NotDer("the TSTInfo is not an OCTET STRING")
    tag, info, _ = read_tlv(octets, 0)
    if tag != SEQUENCE:
        raise NotDer("the TSTInfo is not a SEQUENCE")
    _, _, after = read_tlv(info, 0)  # version
    _, _, after = read_tlv(info, after)  # policy
    tag, imprint, _ = read_tlv(info, after)
    if tag != SEQUENCE:
        raise NotDer("the TSTInfo has no messageImprint")
    tag, algorithm, after = read_tlv(imprint, 0)
    if tag != SEQUENCE or read_tlv(algorithm, 0)[:2] != (OID, SHA256_OID):
        raise NotDer("the messageImprint is not SHA-256")
    tag, digest, _ = read_tlv(imprint, after)
    if tag != OCTET_STRING or len(digest) != 32:
        raise NotDer("the messageImprint's digest is not 32 bytes")
    return digest

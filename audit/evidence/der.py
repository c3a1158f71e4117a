"""The shape of an RFC 3161 timestamp response, read with nothing but the standard library.

Without the authority's certificate a verifier cannot check a timestamp's signature, but it can
refuse bytes that are no timestamp at all: a bundle's `checkpoint.tsr` is either empty or one
DER TimeStampResp (RFC 3161 §2.4.2) whose status is granted and whose token is CMS SignedData.
"""

from __future__ import annotations

SEQUENCE, INTEGER, OID = 0x30, 0x02, 0x06
SIGNED_DATA_OID = bytes.fromhex("2a864886f70d010702")  # 1.2.840.113549.1.7.2
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

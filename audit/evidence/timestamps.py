"""RFC 3161 timestamps of checkpoints: ask a time-stamping authority, and check its answer.

Parsing and verification are sigstore's `rfc3161-client`, not ASN.1 of our own. A timestamp
covers the SHA-256 of the checkpoint note exactly as published (the log's signature and every
cosignature gathered), and asks for the TSA's certificate in the token, so an examiner needs
only the TSA's root certificate to check it.
"""

from __future__ import annotations

import hashlib
import urllib.request

from cryptography import x509
from rfc3161_client import (
    HashAlgorithm,
    TimestampRequestBuilder,
    VerificationError,
    VerifierBuilder,
    decode_timestamp_response,
)

MAX_RESPONSE = 1 << 20


class TimestampError(Exception):
    """The authority did not answer, refused, or answered with a token that does not check."""


def timestamp(url: str, data: bytes, *, timeout: float) -> bytes:
    """A granted timestamp response (DER) over SHA-256(data), its imprint and nonce checked."""
    request = TimestampRequestBuilder(
        data=data, hash_algorithm=HashAlgorithm.SHA256, nonce=True, cert_req=True
    ).build()
    http = urllib.request.Request(
        url,
        data=request.as_bytes(),
        method="POST",
        headers={"Content-Type": "application/timestamp-query"},
    )
    try:
        with urllib.request.urlopen(http, timeout=timeout) as response:  # noqa: S310
            token = response.read(MAX_RESPONSE)
    except (OSError, http.client.HTTPException) as exc:
        raise TimestampError(f"the time-stamping authority did not answer: {exc}") from exc
    try:
        parsed = decode_timestamp_response(token)
    except ValueError as exc:
        raise TimestampError(f"the authority's answer is not a timestamp response: {exc}") from exc
    if parsed.status not in (0, 1):  # granted, granted with modifications
        raise TimestampError(f"the authority refused: status {parsed.status}")
    if parsed.tst_info.message_imprint.message != _sha256(data):
        raise TimestampError("the timestamp is over another message")
    if parsed.tst_info.nonce != request.nonce:
        raise TimestampError("the timestamp answers another request (nonce)")
    return token


def verify(token: bytes, data: bytes, trust_pem: bytes) -> str:
    """Check a timestamp response over `data` against the TSA certificates in `trust_pem`
    (self-signed ones are roots, others intermediates); the time it states, ISO 8601."""
    try:
        parsed = decode_timestamp_response(token)
        builder = VerifierBuilder()
        for cert in x509.load_pem_x509_certificates(trust_pem):
            if cert.issuer == cert.subject:
                builder.add_root_certificate(cert)
            else:
                builder.add_intermediate_certificate(cert)
        builder.build().verify_message(parsed, data)
    except (ValueError, VerificationError) as exc:
        raise TimestampError(f"the timestamp does not verify: {exc}") from exc
    return parsed.tst_info.gen_time.isoformat()


def _sha256(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()

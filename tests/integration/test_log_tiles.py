"""The global log served as c2sp.org/tlog-tiles under /log/, and the proofs the service hands
out read from stored tiles. The client side here is written from the spec alone (no audit.tiles):
it fetches the checkpoint and tiles over HTTP, checks the signature with the pinned key, and
rebuilds the root and an inclusion proof from what it fetched."""

import base64
import hashlib
import struct
import uuid

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from django.test import Client

from audit.evidence import merkle
from audit.log import checkpoint_create, inclusion_of
from audit.models import LedgerEntry, LogTile
from audit.store import trail_open, trail_seal
from audit.verification import verify_everything

pytestmark = pytest.mark.django_db


def sealed(count: int) -> None:
    for _ in range(count):
        trail = trail_open(job_id=uuid.uuid4(), attempt=1)
        trail_seal(trail_id=trail.id, outcome="abandoned")


def h(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def tile_url(level, index: int, width: int = 256) -> str:
    digits = f"{index:03d}"
    digits = "0" * (-len(digits) % 3) + digits
    parts = [digits[i : i + 3] for i in range(0, len(digits), 3)]
    path = "/".join([*("x" + p for p in parts[:-1]), parts[-1]])
    return f"/log/tile/{level}/{path}" + (f".p/{width}" if width < 256 else "")


class SpecClient:
    """A tlog-tiles client from the spec: hashes of level 0 at leaf granularity, rebuilt up."""

    def __init__(self, http: Client):
        self.http = http

    def get(self, url: str) -> bytes:
        response = self.http.get(url)
        assert response.status_code == 200, (url, response.status_code, response.content[:200])
        return response.content

    def level_hashes(self, level: int, size: int) -> list[bytes]:
        count = size // 256**level
        out: list[bytes] = []
        for index in range((count + 255) // 256):
            width = min(256, count - index * 256)
            data = self.get(tile_url(level, index, width))
            assert len(data) == 32 * width
            out += [data[i : i + 32] for i in range(0, len(data), 32)]
        return out

    def root(self, size: int) -> bytes:
        """MTH(D[0:size]) from level-0 tiles, each full subtree checked against level 1."""
        leaves = self.level_hashes(0, size)
        if size >= 256:
            for i, parent in enumerate(self.level_hashes(1, size)):
                assert mth(leaves[i * 256 : (i + 1) * 256]) == parent
        return mth(leaves)


def mth(hashes: list[bytes]) -> bytes:
    if not hashes:
        return h(b"")
    if len(hashes) == 1:
        return hashes[0]
    k = 1 << ((len(hashes) - 1).bit_length() - 1)
    return h(b"\x01" + mth(hashes[:k]) + mth(hashes[k:]))


def verify_checkpoint(note: str, verifier: str) -> tuple[str, int, bytes]:
    """The body's (origin, size, root), after checking the log's Ed25519 signature line."""
    body, signatures = note.split("\n\n", 1)
    body += "\n"
    name, key_hash, key = verifier.split("+", 2)
    raw = base64.b64decode(key)[1:]
    for line in signatures.splitlines():
        signer, blob = line.removeprefix("\u2014 ").split(" ")
        blob = base64.b64decode(blob)
        if signer == name and blob[:4].hex() == key_hash:
            Ed25519PublicKey.from_public_bytes(raw).verify(blob[4:], body.encode())
            origin, size, root = body.splitlines()
            return origin, int(size), base64.b64decode(root)
    raise AssertionError("no signature by the pinned key")


def test_a_spec_client_follows_the_log_from_its_tiles(signing_host, settings):
    sealed(600)
    checkpoint_create()
    client, http = SpecClient(Client()), Client()
    response = http.get("/log/checkpoint")
    assert response.status_code == 200
    assert response["Content-Type"] == "text/plain; charset=utf-8"
    origin, size, root = verify_checkpoint(response.content.decode(), signing_host.verifier)
    assert (origin, size) == (settings.PATHFINDER_LOG_ORIGIN, 600)
    assert client.root(size) == root

    # The entry bundles hold each leaf, and each hashes to its level-0 tile entry.
    leaves = client.level_hashes(0, size)
    for index, width in ((0, 256), (1, 256), (2, 88)):
        data = client.get(tile_url("entries", index, width))
        entries, offset = [], 0
        while offset < len(data):
            (length,) = struct.unpack(">H", data[offset : offset + 2])
            entries.append(data[offset + 2 : offset + 2 + length])
            offset += 2 + length
        assert [h(b"\x00" + e) for e in entries] == leaves[index * 256 : index * 256 + width]

    # Full tiles are immutable; what the checkpoint does not cover is not served.
    assert "immutable" in http.get(tile_url(0, 0))["Cache-Control"]
    assert http.get(tile_url(0, 2)).status_code == 404  # not full at 600
    assert http.get(tile_url(0, 2, 89)).status_code == 404  # beyond the checkpoint
    assert http.get("/log/tile/0/2.p/88").status_code == 404  # not the canonical path
    assert http.post("/log/checkpoint").status_code == 405


def test_a_partial_tile_of_an_earlier_checkpoint_stays_served(signing_host):
    sealed(300)
    checkpoint_create()
    sealed(5)
    checkpoint_create()
    client = SpecClient(Client())
    assert len(client.get(tile_url(0, 1, 44))) == 44 * 32  # the 300-leaf tree's
    assert len(client.get(tile_url(0, 1, 49))) == 49 * 32  # the 305-leaf tree's


def test_proofs_come_from_stored_tiles_and_match_the_plain_tree(signing_host):
    sealed(520)
    checkpoint = checkpoint_create()
    assert LogTile.objects.filter(level=0).count() == 2  # 520 leaves: two full tiles
    payloads = [
        p.encode() for p in LedgerEntry.objects.order_by("seq").values_list("payload", flat=True)
    ]
    assert checkpoint.root_hash == merkle.root(payloads).hex()
    for seq in (0, 255, 256, 519):
        entry = LedgerEntry.objects.get(seq=seq)
        proof = inclusion_of(entry.trail_id).proof
        assert proof == merkle.inclusion_proof(seq, payloads)


def test_a_rewritten_tile_is_named_by_verification_and_nothing_is_signed_over_it(signing_host):
    from django.db import connection

    from audit.log import LogInconsistent

    sealed(260)
    checkpoint_create()
    assert verify_everything().ok
    stored = LogTile.objects.get(level=0, index=0)
    hashes = b"\x00" * 32 + bytes(stored.hashes)[32:]
    root = mth([hashes[i : i + 32] for i in range(0, len(hashes), 32)])
    with connection.cursor() as cursor:  # as a superuser would, past the append-only trigger
        cursor.execute("ALTER TABLE audit_logtile DISABLE TRIGGER ALL")
        cursor.execute(
            "UPDATE audit_logtile SET hashes = %s, root = %s WHERE id = %s",
            [hashes, root, stored.id],
        )
        cursor.execute("ALTER TABLE audit_logtile ENABLE TRIGGER ALL")
    report = verify_everything()
    assert any("stored tile tile/0/000: its hashes differ" in str(f) for f in report.failures)
    sealed(1)
    with pytest.raises(LogInconsistent, match="not consistent with checkpoint"):
        checkpoint_create()

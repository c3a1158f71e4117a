"""A matter's leaves in the public log: the tag that marks them, the times they carry, and the
completeness of a matter bundle against every leaf the log's checkpoint covers.

A leaf sealed since the matter tags (migration audit.0011) carries `matter_tag` =
HMAC-SHA256(matter key, "PF-MATTER-TAG-v1" NUL trail id): without the matter's key a tag is
indistinguishable from random, so the public log reveals no matter's volume; a matter bundle
discloses its matter's key, with which an examiner finds every leaf of the matter in the log's
tiles. docs/audit-format.md specifies the bytes.
"""

from __future__ import annotations

import datetime
import hashlib
import hmac
import json
import re
import struct
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from audit.evidence import merkle, tile_math

_TAG = b"PF-MATTER-TAG-v1"
# Every time the evidence carries: UTC, microseconds, "Z" (2026-12-05T12:34:56.123456Z).
UTC_TIME = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z")
TAGGED_LEAF_KEYS = frozenset({"matter_tag", "sealed_at"})


def matter_tag(matter_key: str, trail_id: str) -> str:
    """The tag a leaf of the matter whose key is `matter_key` (64 hex digits) carries."""
    message = _TAG + b"\x00" + trail_id.encode("utf-8")
    return hmac.new(bytes.fromhex(matter_key), message, hashlib.sha256).hexdigest()


def utc_time(moment: datetime.datetime) -> str:
    """A moment as the evidence writes it (UTC_TIME)."""
    utc = moment.astimezone(datetime.UTC)
    return utc.strftime("%Y-%m-%dT%H:%M:%S.") + f"{utc.microsecond:06d}Z"


@dataclass(frozen=True)
class MatterLeaf:
    index: int
    trail_id: str
    job_id: str


@dataclass(frozen=True)
class Scan:
    """What a walk over the log's leaves found for one matter key."""

    leaves: int  # leaves read
    tagged_from: int | None  # the first leaf that carries a matter_tag field (None: none does)
    matter: list[MatterLeaf]  # the leaves whose tag is the key's, in log order
    foreign: dict[str, int]  # of the trails asked about, those tagged as another matter's


def scan(payloads: Iterable[str], matter_key: str, *, asked: Iterable[str] = ()) -> Scan:
    """Every leaf (ledger payloads in log order) whose tag the matter key makes, and which of
    the `asked` trails the log seals without that tag."""
    asked = set(asked)
    found, foreign, tagged_from, count = [], {}, None, 0
    for index, payload in enumerate(payloads):
        count += 1
        try:
            sealed = json.loads(payload)
        except ValueError:
            continue  # the checkpoint's root covers it whatever it holds; it names no trail
        if not isinstance(sealed, dict) or not isinstance(sealed.get("trail"), str):
            continue
        if "matter_tag" not in sealed:
            continue  # sealed before the tags: no leaf of that time names its matter
        if tagged_from is None:
            tagged_from = index
        trail, tag = sealed["trail"], sealed["matter_tag"]
        if not isinstance(tag, str):
            continue  # a trail that recorded no request: no record names its matter
        if hmac.compare_digest(tag, matter_tag(matter_key, trail)):
            found.append(MatterLeaf(index, trail, str(sealed.get("job"))))
        elif trail in asked:
            foreign[trail] = index
    return Scan(count, tagged_from, found, foreign)


def completeness_failures(found: Scan, listed: Iterable[str], left_out: Iterable[str]) -> list[str]:
    """Each leaf of the matter that the bundle neither holds nor lists as left out, and each
    trail listed as left out that the log seals, but not as the matter's."""
    accounted = set(listed) | set(left_out)
    failures = [
        f"leaf {leaf.index} seals trail {leaf.trail_id} (job {leaf.job_id}) of this matter, "
        "neither in the bundle nor listed as left out"
        for leaf in found.matter
        if leaf.trail_id not in accounted
    ]
    failures += [
        f"trail {trail} is listed as left out, but leaf {index} seals it as no trail of this matter"
        for trail, index in sorted(found.foreign.items(), key=lambda item: item[1])
    ]
    return failures


class LogUnreadable(Exception):
    """The log's entry bundles could not be read, or do not make the checkpoint's root."""


def read_leaves(source: str, size: int, root: bytes) -> list[str]:
    """The first `size` leaves of the log whose tiles `source` serves (a URL prefix such as
    https://host/log, or a directory with the same layout), proven by the checkpoint's `root`."""
    leaves: list[bytes] = []
    for index in range(-(-size // tile_math.WIDTH)):
        width = min(tile_math.WIDTH, size - index * tile_math.WIDTH)
        data = _fetch(source, tile_math.tile_path(0, index, width, entries=True))
        at = 0
        for _ in range(width):
            if at + 2 > len(data):
                raise LogUnreadable(f"entry bundle {index} holds fewer than {width} leaves")
            (length,) = struct.unpack_from(">H", data, at)
            if at + 2 + length > len(data):
                raise LogUnreadable(f"entry bundle {index} holds fewer than {width} leaves")
            leaves.append(data[at + 2 : at + 2 + length])
            at += 2 + length
        if at != len(data):
            raise LogUnreadable(f"entry bundle {index} holds more than its {width} leaves")
    if merkle.root(leaves) != root:
        raise LogUnreadable(f"the log's first {size} leaves do not make the checkpoint's root")
    try:
        return [leaf.decode("utf-8") for leaf in leaves]
    except UnicodeDecodeError as exc:
        raise LogUnreadable(f"a leaf is not UTF-8 ({exc})") from exc


def _fetch(source: str, path: str) -> bytes:
    try:
        if source.startswith(("https://", "http://")):
            with urllib.request.urlopen(f"{source.rstrip('/')}/{path}", timeout=30) as response:
                return response.read()
        return (Path(source) / path).read_bytes()
    except (OSError, ValueError) as exc:  # urllib's errors are OSErrors
        raise LogUnreadable(f"{path}: {exc}") from exc

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
_BATCH_TAG = b"PF-BATCH-TAG-v1"
# Every time the evidence carries: UTC, microseconds, "Z" (2026-12-05T12:34:56.123456Z).
UTC_TIME = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z", re.ASCII)
TAGGED_LEAF_KEYS = frozenset({"matter_tag", "sealed_at"})
# Leaves sealed since matter format 3 also say what a selection is made of: when the trail's job
# was submitted and (by a tag only the matter's key makes) which batch, if any, it was a line of.
SELECTION_LEAF_KEYS = frozenset({"submitted_at", "batch_tag"})

# Why a trail of the matter is not in a matter bundle (matter.json's left_out reasons, matter
# format 3): each is one a verifier checks against the log's signed leaves (reason_failures).
OPEN = "open"  # no leaf up to the checkpoint seals it: its job has not ended
SEALED_AFTER = "sealed_after_checkpoint"  # no leaf up to the checkpoint seals it yet
NO_REQUEST = "no_request"  # its leaf carries a null matter tag: it recorded nothing to review
OUTSIDE = "outside_selection"  # its leaf's submission time or batch tag is outside the selection
LEFT_OUT_REASONS = (OPEN, SEALED_AFTER, NO_REQUEST, OUTSIDE)


def matter_tag(matter_key: str, trail_id: str) -> str:
    """The tag a leaf of the matter whose key is `matter_key` (64 hex digits) carries."""
    message = _TAG + b"\x00" + trail_id.encode("utf-8")
    return hmac.new(bytes.fromhex(matter_key), message, hashlib.sha256).hexdigest()


def batch_tag(matter_key: str, trail_id: str, batch_id: str) -> str:
    """The tag a leaf of the matter carries for the batch its job was a line of ("" for none):
    one per trail, so equal tags never link two leaves of one batch in the public log."""
    message = _BATCH_TAG + b"\x00" + trail_id.encode("utf-8") + b"\x00" + batch_id.encode("utf-8")
    return hmac.new(bytes.fromhex(matter_key), message, hashlib.sha256).hexdigest()


@dataclass(frozen=True)
class Selection:
    """What a matter bundle holds: the matter's trails whose jobs were submitted from `since` to
    `until` (UTC days "YYYY-MM-DD", inclusive; None: unbounded) and, when `batch` names one, were
    lines of that batch."""

    since: str | None = None
    until: str | None = None
    batch: str | None = None

    def holds(
        self,
        sealed: dict,
        matter_key: str,
        *,
        submitted_at: str | None = None,
        first_line_at: str | None = None,
    ) -> bool | None:
        """Whether the trail a leaf of the matter seals is of the selection; None when nothing
        signed tells. The leaf's own `submitted_at` and `batch_tag` decide; a leaf sealed before
        leaves carried them is held to `submitted_at` (its request record's), and is outside a
        day range it was sealed before, or a batch whose first line (`first_line_at`, the
        earliest submission of the batch's listed trails) it was sealed before."""
        verdicts = []
        submitted = sealed.get("submitted_at", submitted_at)
        sealed_at = sealed.get("sealed_at")
        if self.since is not None or self.until is not None:
            if isinstance(submitted, str):
                day = submitted[:10]
                verdicts.append(
                    (self.since is None or self.since <= day)
                    and (self.until is None or day <= self.until)
                )
            elif (
                isinstance(sealed_at, str)
                and self.since is not None
                and sealed_at[:10] < self.since
            ):
                verdicts.append(False)  # submitted before it was sealed
            else:
                verdicts.append(None)
        if self.batch is not None:
            tag = sealed.get("batch_tag")
            if isinstance(tag, str):
                verdicts.append(
                    hmac.compare_digest(tag, batch_tag(matter_key, sealed["trail"], self.batch))
                )
            elif (
                isinstance(sealed_at, str)
                and first_line_at is not None
                and sealed_at < first_line_at
            ):
                verdicts.append(False)  # sealed before the batch's first line was submitted
            else:
                verdicts.append(None)
        if False in verdicts:
            return False
        return None if None in verdicts else True


def utc_time(moment: datetime.datetime) -> str:
    """A moment as the evidence writes it (UTC_TIME)."""
    utc = moment.astimezone(datetime.UTC)
    return utc.strftime("%Y-%m-%dT%H:%M:%S.") + f"{utc.microsecond:06d}Z"


@dataclass(frozen=True)
class MatterLeaf:
    index: int
    trail_id: str
    job_id: str
    sealed: dict


@dataclass(frozen=True)
class Scan:
    """What a walk over the log's leaves found for one matter key."""

    leaves: int  # leaves read
    tagged_from: int | None  # the first leaf that carries a matter_tag field (None: none does)
    matter: list[MatterLeaf]  # the leaves whose tag is the key's, in log order
    asked: dict[str, MatterLeaf]  # of the trails asked about, the leaf that seals each
    any_selection_leaf: bool = False  # whether a leaf of the matter carries submitted_at

    def foreign(self, matter_key: str) -> dict[str, int]:
        """Of the trails asked about, those the log seals as another matter's."""
        return {
            trail: leaf.index
            for trail, leaf in self.asked.items()
            if isinstance(leaf.sealed.get("matter_tag"), str)
            and not hmac.compare_digest(leaf.sealed["matter_tag"], matter_tag(matter_key, trail))
        }


def scan(payloads: Iterable[str], matter_key: str, *, asked: Iterable[str] = ()) -> Scan:
    """Every leaf (ledger payloads in log order) whose tag the matter key makes, and the leaf
    that seals each of the `asked` trails, whatever its tag."""
    asked = set(asked)
    found, sealing, tagged_from, count = [], {}, None, 0
    for index, payload in enumerate(payloads):
        count += 1
        try:
            sealed = json.loads(payload)
        except ValueError:
            continue  # the checkpoint's root covers it whatever it holds; it names no trail
        if not isinstance(sealed, dict) or not isinstance(sealed.get("trail"), str):
            continue
        trail = sealed["trail"]
        leaf = MatterLeaf(index, trail, str(sealed.get("job")), sealed)
        if trail in asked:
            sealing[trail] = leaf
        if "matter_tag" not in sealed:
            continue  # sealed before the tags: no leaf of that time names its matter
        if tagged_from is None:
            tagged_from = index
        tag = sealed["matter_tag"]
        if isinstance(tag, str) and hmac.compare_digest(tag, matter_tag(matter_key, trail)):
            found.append(leaf)
    selection_leaf = any(set(leaf.sealed) >= SELECTION_LEAF_KEYS for leaf in found)
    return Scan(count, tagged_from, found, sealing, selection_leaf)


def completeness_failures(found: Scan, listed: Iterable[str], left_out: Iterable[str]) -> list[str]:
    """Each leaf of the matter that the bundle neither holds nor lists as left out, and each
    trail listed as left out that the log seals as another matter's."""
    accounted = set(listed) | set(left_out)
    failures = [
        f"leaf {leaf.index} seals trail {leaf.trail_id} (job {leaf.job_id}) of this matter, "
        "neither in the bundle nor listed as left out"
        for leaf in found.matter
        if leaf.trail_id not in accounted
    ]
    return failures


def reason_failures(
    found: Scan,
    matter_key: str,
    left_out: Iterable[dict],
    selection: Selection,
    first_line_at: str | None = None,
) -> list[str]:
    """Each left_out entry whose reason the log's signed leaves up to the checkpoint refute: a
    trail left out as open or sealed after the checkpoint that a leaf seals; one left out for
    recording no request whose leaf carries a matter tag; one left out as outside the selection
    whose leaf does not show it outside (or is another matter's); one whose leaf seals another
    job. `found` must have been scanned with every left-out trail asked."""
    failures = []
    foreign = found.foreign(matter_key)
    for entry in left_out:
        trail, reason = entry["trail_id"], entry["reason"]
        leaf = found.asked.get(trail)
        name = f"trail {trail} is left out as {reason!r}"
        if leaf is not None and leaf.job_id != entry["job_id"]:
            failures.append(
                f"{name} of job {entry['job_id']}, but leaf {leaf.index} seals job {leaf.job_id}"
            )
        elif reason in (OPEN, SEALED_AFTER):
            if leaf is not None:
                failures.append(f"{name}, but leaf {leaf.index}, under the checkpoint, seals it")
        elif leaf is None:
            failures.append(f"{name}, but no leaf under the checkpoint seals it")
        elif trail in foreign:
            failures.append(f"{name}, but leaf {leaf.index} seals it as no trail of this matter")
        elif reason == NO_REQUEST:
            if leaf.sealed.get("matter_tag", "") is not None:
                failures.append(
                    f"{name}, but leaf {leaf.index} does not carry the null matter tag of a "
                    "trail that recorded no request"
                )
        elif reason == OUTSIDE and not isinstance(leaf.sealed.get("matter_tag"), str):
            failures.append(f"{name}, but leaf {leaf.index} carries no tag of this matter")
        elif reason == OUTSIDE:
            holds = selection.holds(leaf.sealed, matter_key, first_line_at=first_line_at)
            if holds is not False:
                failures.append(
                    f"{name}, but leaf {leaf.index} "
                    + ("shows it in the selection" if holds else "does not show it outside it")
                )
        else:
            failures.append(f"{name}, which is no reason a verifier can check")
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

"""A matter's leaves in the public log (audit.evidence.matter_leaves): the tag, re-derived here
from its formula with hmac alone; the scan an examiner runs over the log's leaves; and reading
the leaves from a directory of entry bundles, proven by the checkpoint's root."""

import datetime
import hashlib
import hmac
import json
import struct
from pathlib import Path

import pytest

from audit.evidence import chain, matter_leaves, merkle
from audit.evidence.tile_math import WIDTH, tile_path

KEY = "6d" * 32
OTHER_KEY = "a1" * 32


def tag(key: str, trail: str) -> str:
    return hmac.new(
        bytes.fromhex(key), b"PF-MATTER-TAG-v1\x00" + trail.encode(), hashlib.sha256
    ).hexdigest()


def leaf(n: int, key: str | None = KEY, *, tagged: bool = True) -> str:
    trail = f"00000000-0000-4000-8000-{n:012d}"
    return chain.ledger_payload(
        format_version=2,
        trail_id=trail,
        job_id=f"11111111-0000-4000-8000-{n:012d}",
        record_count=3,
        head_hash="ab" * 32,
        outcome="succeeded",
        tagged=(tag(key, trail) if key else None, "2026-12-05T12:00:00.000000Z")
        if tagged
        else None,
    )


def trail(n: int) -> str:
    return f"00000000-0000-4000-8000-{n:012d}"


def log() -> list[str]:
    """Leaves 2 and 4 the matter's (KEY), 1 another matter's, 0 sealed before the tags, 3 a
    trail that recorded no request."""
    return [leaf(0, tagged=False), leaf(1, OTHER_KEY), leaf(2), leaf(3, None), leaf(4)]


def test_the_tag_is_the_documented_hmac():
    assert matter_leaves.matter_tag(KEY, trail(1)) == tag(KEY, trail(1))
    assert matter_leaves.matter_tag(KEY, trail(1)) != matter_leaves.matter_tag(OTHER_KEY, trail(1))


def test_times_are_utc_with_microseconds_and_a_z():
    moment = datetime.datetime(
        2026, 12, 5, 13, 4, 5, 7, tzinfo=datetime.timezone(datetime.timedelta(hours=1))
    )
    written = matter_leaves.utc_time(moment)
    assert written == "2026-12-05T12:04:05.000007Z"
    assert matter_leaves.UTC_TIME.fullmatch(written)
    assert not matter_leaves.UTC_TIME.fullmatch("2026-12-05T12:04:05Z")


def test_a_tagged_leaf_holds_the_tag_and_the_seal_time():
    untagged = {"v", "trail", "job", "records", "head", "outcome"}
    assert set(json.loads(leaf(1, tagged=False))) == untagged
    assert set(json.loads(leaf(1))) == untagged | {"matter_tag", "sealed_at"}


def test_the_scan_finds_the_matters_leaves_from_where_the_tags_begin():
    found = matter_leaves.scan([*log(), "not json"], KEY, asked=[trail(1), trail(9)])
    assert found.leaves == 6 and found.tagged_from == 1
    assert [(m.index, m.trail_id) for m in found.matter] == [(2, trail(2)), (4, trail(4))]
    assert found.foreign(KEY) == {trail(1): 1}
    assert set(found.asked) == {trail(1)}  # trail 9: no leaf seals it


@pytest.mark.parametrize(
    ("listed", "left_out", "says"),
    [
        ([trail(2), trail(4)], [], []),
        ([trail(2)], [trail(4)], []),
        ([trail(2)], [], [f"leaf 4 seals trail {trail(4)}"]),
    ],
)
def test_completeness_names_each_leaf_of_the_matter_the_bundle_does_not_account_for(
    listed, left_out, says
):
    found = matter_leaves.scan(log(), KEY, asked=left_out)
    failures = matter_leaves.completeness_failures(found, listed, left_out)
    assert len(failures) == len(says)
    for failure, said in zip(failures, says, strict=True):
        assert said in failure


def mirror(tmp_path, leaves: list[bytes]):
    for index in range(-(-len(leaves) // WIDTH)):
        chunk = leaves[index * WIDTH : (index + 1) * WIDTH]
        path = tmp_path / tile_path(0, index, len(chunk), entries=True)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"".join(struct.pack(">H", len(d)) + d for d in chunk))
    return str(tmp_path)


def test_the_leaves_are_read_from_entry_bundles_and_proven_by_the_root(tmp_path):
    leaves = [leaf(n).encode() for n in range(300)]  # a full entry bundle and a partial one
    log = mirror(tmp_path, leaves)
    assert matter_leaves.read_leaves(log, 300, merkle.root(leaves)) == [x.decode() for x in leaves]
    assert len(matter_leaves.read_leaves(log, 256, merkle.root(leaves[:256]))) == 256


def test_leaves_that_do_not_make_the_root_or_a_short_bundle_are_refused(tmp_path):
    leaves = [leaf(n).encode() for n in range(10)]
    log = mirror(tmp_path, leaves)
    with pytest.raises(matter_leaves.LogUnreadable, match="do not make the checkpoint's root"):
        matter_leaves.read_leaves(log, 10, merkle.root(leaves[:9] + [leaf(99).encode()]))
    with pytest.raises(matter_leaves.LogUnreadable, match="entry/|entries"):
        matter_leaves.read_leaves(log, 11, merkle.root(leaves))  # no bundle of width 11
    bundle = tmp_path / tile_path(0, 0, 10, entries=True)
    bundle.write_bytes(bundle.read_bytes()[:-5])
    with pytest.raises(matter_leaves.LogUnreadable, match="fewer than 10 leaves"):
        matter_leaves.read_leaves(log, 10, merkle.root(leaves))


def test_the_formats_documented_example_tag_is_the_codes():
    doc = (Path(__file__).parents[3] / "docs" / "audit-format.md").read_text("utf-8")
    example = matter_leaves.matter_tag("6d" * 32, "00000000-0000-4000-8000-000000000001")
    assert f"`{example}`" in doc


# Leaves of matter format 3: the submission time and the batch tag. Trail 10 a line of batch
# "batch_a" submitted on 12-01, 11 a job of no batch submitted on 12-03, 12 no request.
def selection_leaf(n: int, submitted: str | None, batch: str | None) -> dict:
    trail_id = trail(n)
    return json.loads(
        chain.ledger_payload(
            format_version=4,
            trail_id=trail_id,
            job_id=f"11111111-0000-4000-8000-{n:012d}",
            record_count=3 if submitted else 0,
            head_hash="ab" * 32,
            outcome="succeeded" if submitted else "failed",
            tagged=(tag(KEY, trail_id) if submitted else None, "2026-12-04T00:00:00.000000Z"),
            selection=(
                f"{submitted}T10:00:00.000000Z" if submitted else None,
                matter_leaves.batch_tag(KEY, trail_id, batch or "") if submitted else None,
            ),
        )
    )


def batch_tag(key: str, trail_id: str, batch: str) -> str:
    message = b"PF-BATCH-TAG-v1\x00" + trail_id.encode() + b"\x00" + batch.encode()
    return hmac.new(bytes.fromhex(key), message, hashlib.sha256).hexdigest()


def test_the_batch_tag_is_the_documented_hmac_and_differs_per_trail():
    assert matter_leaves.batch_tag(KEY, trail(1), "batch_a") == batch_tag(KEY, trail(1), "batch_a")
    same_batch = {matter_leaves.batch_tag(KEY, trail(n), "batch_a") for n in range(5)}
    assert len(same_batch) == 5  # two lines of one batch are not linked in the public log


@pytest.mark.parametrize(
    ("selection", "line", "other"),
    [
        (matter_leaves.Selection(), True, True),
        (matter_leaves.Selection(since="2026-12-01", until="2026-12-01"), True, False),
        (matter_leaves.Selection(since="2026-12-02"), False, True),
        (matter_leaves.Selection(until="2026-12-02"), True, False),
        (matter_leaves.Selection(batch="batch_a"), True, False),
        (matter_leaves.Selection(batch="batch_b"), False, False),
    ],
)
def test_a_leaf_is_held_to_a_selection_by_what_it_signs(selection, line, other):
    assert selection.holds(selection_leaf(10, "2026-12-01", "batch_a"), KEY) is line
    assert selection.holds(selection_leaf(11, "2026-12-03", None), KEY) is other


@pytest.mark.parametrize(
    ("selection", "verdict"),
    [
        (matter_leaves.Selection(), True),
        (matter_leaves.Selection(since="2026-12-06"), False),  # sealed 12-05: submitted before
        (matter_leaves.Selection(since="2026-12-05"), None),
        (matter_leaves.Selection(until="2026-12-04"), None),  # submitted any time before 12-05
        (matter_leaves.Selection(batch="batch_a"), False),  # sealed before the first line
    ],
)
def test_a_leaf_sealed_before_the_selection_fields_is_outside_only_what_it_predates(
    selection, verdict
):
    old = json.loads(leaf(12))  # sealed 2026-12-05T12:00, no submission time or batch tag
    assert selection.holds(old, KEY, first_line_at="2026-12-06T00:00:00.000000Z") is verdict
    if selection.batch is not None:  # a line submitted before it was sealed: cannot tell
        assert selection.holds(old, KEY, first_line_at="2026-12-05T00:00:00.000000Z") is None


WHOLE = matter_leaves.Selection()


def reasons(left_out, selection=WHOLE, first_line_at=None):
    leaves = [
        json.dumps(selection_leaf(10, "2026-12-01", "batch_a")),
        json.dumps(selection_leaf(11, "2026-12-03", None)),
        json.dumps(selection_leaf(12, None, None)),
        leaf(1, OTHER_KEY),
    ]
    entries = [
        {"trail_id": trail(n), "job_id": f"11111111-0000-4000-8000-{n:012d}", "reason": r}
        for n, r in left_out
    ]
    found = matter_leaves.scan(leaves, KEY, asked=[e["trail_id"] for e in entries])
    return matter_leaves.reason_failures(found, KEY, entries, selection, first_line_at)


def test_a_true_reason_passes():
    days = matter_leaves.Selection(since="2026-12-03")
    assert reasons([(13, "open"), (14, "sealed_after_checkpoint")]) == []
    assert reasons([(12, "no_request"), (10, "outside_selection")], days) == []
    assert reasons([(11, "outside_selection")], matter_leaves.Selection(batch="batch_a")) == []


@pytest.mark.parametrize(
    ("left_out", "selection", "says"),
    [
        ([(10, "open")], matter_leaves.Selection(), "leaf 0, under the checkpoint, seals it"),
        ([(11, "sealed_after_checkpoint")], matter_leaves.Selection(), "leaf 1, under the"),
        ([(10, "no_request")], matter_leaves.Selection(), "does not carry the null matter tag"),
        ([(13, "no_request")], matter_leaves.Selection(), "no leaf under the checkpoint seals"),
        ([(10, "outside_selection")], matter_leaves.Selection(), "shows it in the selection"),
        (
            [(10, "outside_selection")],
            matter_leaves.Selection(batch="batch_a"),
            "shows it in the selection",
        ),
        (
            [(11, "outside_selection")],
            matter_leaves.Selection(since="2026-12-03"),
            "shows it in the selection",
        ),
        ([(1, "outside_selection")], matter_leaves.Selection(), "as no trail of this matter"),
        (
            [(12, "outside_selection")],
            matter_leaves.Selection(since="2026-12-05"),
            "carries no tag of this matter",
        ),
        ([(10, "forgotten")], matter_leaves.Selection(), "no reason a verifier can check"),
    ],
)
def test_a_false_reason_is_refuted_by_the_leaves(left_out, selection, says):
    failures = reasons(left_out, selection)
    assert len(failures) == 1 and says in failures[0], failures


def test_a_reason_for_another_job_is_refuted():
    leaves = [json.dumps(selection_leaf(12, None, None))]
    entry = {"trail_id": trail(12), "job_id": "11111111-0000-4000-8000-000000000099"}
    found = matter_leaves.scan(leaves, KEY, asked=[trail(12)])
    failures = matter_leaves.reason_failures(
        found, KEY, [{**entry, "reason": "no_request"}], matter_leaves.Selection()
    )
    assert len(failures) == 1 and "but leaf 0 seals job" in failures[0]


def test_the_formats_documented_example_batch_tag_is_the_codes():
    doc = (Path(__file__).parents[3] / "docs" / "audit-format.md").read_text("utf-8")
    example = matter_leaves.batch_tag(
        "6d" * 32, "00000000-0000-4000-8000-000000000001", "batch_0123456789abcdef0123456789abcdef"
    )
    assert f"`{example}`" in doc

"""A matter bundle is written a trail at a time (issue 41, item 5): the same bytes as the
committed golden sample, whatever is streamed, and memory that does not hold the bundle."""

import dataclasses
import hashlib
import json
import tracemalloc
from pathlib import Path

import pytest

from audit.evidence import bundle
from tests.data import make_golden_matter

SAMPLE = (Path(__file__).parents[2] / "data" / "sample-matter.zip").read_bytes()


def test_the_streamed_writer_writes_the_golden_sample_byte_for_byte(tmp_path):
    parts = make_golden_matter.parts()
    digest = bundle.write_matter_bundle(
        tmp_path / "matter.zip", **{**parts, "trails": iter(parts["trails"])}
    )
    assert (tmp_path / "matter.zip").read_bytes() == SAMPLE
    assert digest == hashlib.sha256(SAMPLE).hexdigest()
    assert not list(tmp_path.glob("*.partial"))


def test_a_trail_matter_json_does_not_list_fails_and_leaves_no_file_behind(tmp_path):
    parts = make_golden_matter.parts()
    with pytest.raises(ValueError, match="exactly the trails given"):
        bundle.write_matter_bundle(
            tmp_path / "matter.zip", **{**parts, "trails": parts["trails"][:1]}
        )
    assert list(tmp_path.iterdir()) == []  # neither the bundle nor its .partial


def large_matter(trails: int, pad: int) -> dict:
    """The sample's fields with its first trail copied `trails` times under new ids, each
    request record padded by `pad` characters: the evidence made as the writer asks for it."""
    parts = make_golden_matter.parts()
    golden, listed = parts["trails"][0], parts["matter"]["trails"][0]
    ids = [f"00000000-0000-4000-a000-{n:012d}" for n in range(trails)]

    def padded(trail_id: str) -> bundle.TrailEvidence:
        records = [list(record) for record in golden.records]
        request = json.loads(records[0][3])
        records[0][3] = json.dumps({**request, "pad": "x" * pad}, separators=(",", ":"))
        return dataclasses.replace(golden, trail_id=trail_id, records=records)

    matter = {**parts["matter"], "trails": [{**listed, "trail_id": t} for t in ids]}
    return {**parts, "matter": matter, "trails": (padded(t) for t in ids)}


def peak_bytes(write) -> int:
    tracemalloc.start()
    try:
        write()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_writing_a_matter_holds_one_trail_not_the_bundle(tmp_path):
    def streamed(trails: int) -> tuple[int, int]:
        path = tmp_path / f"{trails}.zip"
        peak = peak_bytes(
            lambda: bundle.write_matter_bundle(path, **large_matter(trails, 1024 * 1024))
        )
        return peak, path.stat().st_size

    streamed(2)  # ReportLab's imports and fonts, once
    peak, size = streamed(20)
    more_peak, more_size = streamed(40)
    assert size > 20 * 1024 * 1024 and more_size > 2 * size - 1024 * 1024
    assert more_peak < more_size / 4, (more_peak, more_size)
    # Twenty trails more (20 MiB) cost what their facts and lines in report.pdf cost (the report
    # is made whole, after the trails), not the trails.
    assert more_peak - peak < (more_size - size) / 10, (peak, more_peak, size, more_size)
    # The wall removed: the same bundle assembled in memory holds all of it.
    whole = peak_bytes(lambda: bundle.matter_bundle_bytes(**large_matter(40, 1024 * 1024)))
    assert whole > more_size, (whole, more_size)

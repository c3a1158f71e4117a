"""The report of a trail with no records (a job whose models never loaded) still renders, and
equal input gives equal bytes."""

import subprocess

from audit.evidence import bundle
from audit.evidence.report import TrailFacts, trail_report

LISTED = {
    "trail_id": "00000000-0000-4000-8000-000000000001",
    "job_id": "00000000-0000-4000-9000-000000000001",
    "attempt": 1,
    "outcome": "failed",
    "abandoned": False,
    "leaf_index": 0,
}
ROOT = "A" * 43 + "="
NOTE = f"example.org/log\n1\n{ROOT}\n\n\u2014 example.org/log AAAA\n"


def test_an_empty_trail_reports_no_decisions_and_renders_the_same_bytes_twice():
    facts = TrailFacts.of(LISTED, [], bundle.Texts({}), "e" * 64)
    assert (facts.steps, facts.record_count, facts.question, facts.answer) == (0, 0, None, None)
    fields = dict(
        verification="INTACT", checkpoint_note=NOTE, signed_by="o", origin="o", bundle_format=6
    )
    first, again = trail_report(facts=facts, **fields), trail_report(facts=facts, **fields)
    assert first == again and first.startswith(b"%PDF-")
    text = subprocess.run(
        ["pdftotext", "-", "-"], input=first, capture_output=True, check=True
    ).stdout.decode()
    assert "0 steps" in text and "(withheld, or not bound)" in text and "e" * 64 in text

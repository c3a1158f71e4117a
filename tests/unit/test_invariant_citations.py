"""Every "invariant N" the code, the tests and the docs cite resolves to a heading of
docs/architecture.md (issue 45 item 4): the invariants live in the repository, under the numbers
that are cited."""

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CITATION = re.compile(r"\b[Ii]nvariant (\d+)\b")
HEADING = re.compile(r"^### Invariant (\d+): \S", re.MULTILINE)


def cited_numbers() -> dict[int, list[str]]:
    tracked = subprocess.run(
        ["git", "ls-files", "*.py", "*.md", "*.html", "*.js"],
        cwd=ROOT, capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    cited: dict[int, list[str]] = {}
    for name in tracked:
        for number in CITATION.findall((ROOT / name).read_text(errors="replace")):
            cited.setdefault(int(number), []).append(name)
    return cited


def test_every_cited_invariant_is_a_heading_of_the_architecture_page():
    headings = {int(n) for n in HEADING.findall((ROOT / "docs/architecture.md").read_text())}
    assert headings == set(range(1, 10))  # the nine, numbered as the code cites them
    cited = cited_numbers()
    assert {1, 3, 4, 6} <= set(cited)  # the scan finds the code's citations
    unresolved = {number: files for number, files in cited.items() if number not in headings}
    assert unresolved == {}

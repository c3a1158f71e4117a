"""The examiner's package, pathfinder-verify: a wheel of the Django-free audit.evidence and the
`python -m audit.offline_verify` entry point, whose only dependency is `cryptography`
(docs/examiner-package.md). Built by scripts/build_verifier_wheel.py and served at /examiner/.

The build is reproducible: the same source gives the same bytes (files in name order, stored,
one fixed time), so an examiner who builds it from this repository's source gets the SHA-256 of
the published wheel, and can tell whether the wheel they were handed is it. It needs nothing but
the standard library (no build backend, no network, no Django).
"""

from __future__ import annotations

import base64
import hashlib
import io
import re
import zipfile
from dataclasses import dataclass
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NAME = "pathfinder_verify"
# Only what the verifier imports: audit/__init__.py and audit/offline_verify.py (the name the
# bundle's README gives), and audit/evidence/ whole.
SOURCES = ("audit/__init__.py", "audit/offline_verify.py")
PACKAGE = "audit/evidence"
REQUIRES = (
    "Requires-Python: >=3.11",
    "Requires-Dist: cryptography>=43,<51",
    "Provides-Extra: report",
    'Requires-Dist: reportlab==5.1.0; extra == "report"',
    "Provides-Extra: tsa",
    'Requires-Dist: rfc3161-client>=1.0.9,<2; extra == "tsa"',
)
FIXED_TIME = (1980, 1, 1, 0, 0, 0)


@dataclass(frozen=True)
class Wheel:
    filename: str
    data: bytes

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()


def version() -> str:
    """audit.evidence.VERIFIER_VERSION, read from the source, not imported."""
    text = (ROOT / PACKAGE / "__init__.py").read_text("utf-8")
    return re.search(r'^VERIFIER_VERSION = "([^"]+)"$', text, re.M).group(1)


@cache
def wheel() -> Wheel:
    """The wheel of the source this module sits in (made once per process)."""
    release = version()
    members = _files() + _dist_info(release)
    record = f"{NAME}-{release}.dist-info/RECORD"
    lines = [_record_line(p, d) for p, d in members] + [f"{record},,"]
    members.append((record, ("\n".join(lines) + "\n").encode()))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as archive:
        for path, data in members:
            info = zipfile.ZipInfo(path, date_time=FIXED_TIME)
            info.external_attr = 0o644 << 16
            info.create_system = 3  # Unix, whatever machine builds it
            archive.writestr(info, data)
    return Wheel(f"{NAME}-{release}-py3-none-any.whl", out.getvalue())


def _files() -> list[tuple[str, bytes]]:
    """(path in the wheel, bytes) of every source file, in name order."""
    paths = [ROOT / s for s in SOURCES]
    paths += [p for p in (ROOT / PACKAGE).iterdir() if p.is_file() and p.suffix in (".py", ".json")]
    return sorted((p.relative_to(ROOT).as_posix(), p.read_bytes()) for p in paths)


def _dist_info(release: str) -> list[tuple[str, bytes]]:
    info = f"{NAME}-{release}.dist-info"
    summary = (ROOT / "docs" / "examiner-package.md").read_text("utf-8")
    metadata = "\n".join(
        (
            "Metadata-Version: 2.1",
            "Name: pathfinder-verify",
            f"Version: {release}",
            "Summary: Verify Pathfinder evidence bundles offline, with nothing of Pathfinder's",
            "License: Proprietary",
            *REQUIRES,
            "Description-Content-Type: text/markdown",
            "",
            summary,
        )
    )
    wheel_file = "Wheel-Version: 1.0\nGenerator: pathfinder audit.examiner_package\n"
    wheel_file += "Root-Is-Purelib: true\nTag: py3-none-any\n"
    entry_points = "[console_scripts]\npathfinder-verify = audit.evidence.offline_verify:main\n"
    return [
        (f"{info}/METADATA", metadata.encode("utf-8")),
        (f"{info}/WHEEL", wheel_file.encode()),
        (f"{info}/entry_points.txt", entry_points.encode()),
        (f"{info}/top_level.txt", b"audit\n"),
    ]


def _record_line(path: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{path},sha256={digest},{len(data)}"

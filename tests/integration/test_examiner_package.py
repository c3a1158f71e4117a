"""An examiner needs nothing of ours (issue 40, item 5): the examiner's package, pathfinder-verify,
built reproducibly from this source and served at /examiner/, installed in a fresh virtual
environment that holds nothing else but `cryptography`, verifies bundles exported by the service
by following the commands their own README.txt gives, word for word.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from django.core.management import call_command

from audit import examiner_package
from audit.keys import signing_key

from .test_matter_export import MATTER_NAME, chat

REPO = Path(__file__).parents[2]
# What the venv may hold: the package, its one dependency and that one's own, and the venv's
# own installers.
ALLOWED = {"pathfinder-verify", "cryptography", "cffi", "pycparser", "pip", "setuptools"}


@pytest.fixture(scope="module")
def examiner_venv(tmp_path_factory) -> Path:
    """A fresh venv (no system site-packages) with the wheel built from this checkout."""
    root = tmp_path_factory.mktemp("examiner")
    built = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "build_verifier_wheel.py"), "--out", str(root)],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    wheel = Path(built.split("\n")[0])
    subprocess.run([sys.executable, "-m", "venv", str(root / "examiner")], check=True)
    subprocess.run(
        [str(root / "examiner" / "bin" / "pip"), "install", "--quiet", str(wheel)],
        check=True, timeout=300,
    )  # fmt: skip
    return root


def installed(venv: Path) -> set[str]:
    listed = subprocess.run(
        [str(venv / "examiner" / "bin" / "pip"), "list", "--format=json"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    return {entry["name"].lower() for entry in json.loads(listed)}


def test_the_build_is_reproducible_and_served_as_built(client, tmp_path):
    again = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "build_verifier_wheel.py"), "--out", str(tmp_path)],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    wheel = examiner_package.wheel()
    built = (tmp_path / wheel.filename).read_bytes()
    assert built == wheel.data and f"SHA-256 {wheel.sha256}" in again
    page = client.get("/examiner/")
    assert page.status_code == 200
    assert f"sha256: {wheel.sha256}" in page.content.decode()
    assert signing_key().verifier in page.content.decode()
    served = client.get(f"/examiner/{wheel.filename}")
    assert served.status_code == 200 and served.content == built
    assert served["X-Content-SHA256"] == hashlib.sha256(built).hexdigest()
    assert client.get("/examiner/pathfinder_verify-0.0.1-py3-none-any.whl").status_code == 404
    with zipfile.ZipFile(io.BytesIO(built)) as archive:
        names = archive.namelist()
    # The Django side of the audit is not in it: only the verifier and its format.
    assert all(n.startswith(("audit/evidence/", "pathfinder_verify-")) for n in names if
               n not in ("audit/__init__.py", "audit/offline_verify.py"))  # fmt: skip


def test_a_fresh_venv_holds_only_the_package_and_cryptography(examiner_venv):
    assert installed(examiner_venv) <= ALLOWED
    assert {"pathfinder-verify", "cryptography"} <= installed(examiner_venv)
    django = subprocess.run(
        [str(examiner_venv / "examiner" / "bin" / "python"), "-c", "import django"],
        capture_output=True,
    )
    assert django.returncode != 0  # nothing of the service came along


def readme_commands(readme: str) -> list[str]:
    """The indented command lines of README.txt's "HOW TO CHECK IT WITHOUT PATHFINDER"."""
    section = readme.split("HOW TO CHECK IT WITHOUT PATHFINDER", 1)[1].split("\n\n", 2)[1]
    return [line.strip() for line in section.split("\n") if line.startswith("    ")]


@pytest.mark.parametrize("kind", ["trail", "matter"])
def test_a_bundle_verifies_by_its_own_readmes_words(examiner_venv, owner, beat, tmp_path, kind):
    job = chat(owner.api, "What is the capital of France?")
    beat()
    bundle = tmp_path / "this-bundle.zip"
    if kind == "trail":
        call_command("export_trail", "--job", str(job.id), "--out", str(bundle))
    else:
        call_command("export_matter", "--matter", MATTER_NAME, "--out", str(bundle))
    with zipfile.ZipFile(bundle) as archive:
        readme = archive.read("README.txt").decode()
    commands = readme_commands(readme)
    assert commands == [
        "python3 -m venv examiner",
        "examiner/bin/pip install pathfinder_verify-<version>-py3-none-any.whl",
        "examiner/bin/pathfinder-verify this-bundle.zip --key '<the verifier key you hold>'",
    ]
    # The venv and the install are the fixture's (the same two commands, done once); the third
    # is run as written, in the directory that holds the venv and the bundle.
    (tmp_path / "examiner").symlink_to(examiner_venv / "examiner")
    line = commands[2].replace("'<the verifier key you hold>'", repr(signing_key().verifier))
    verdict = subprocess.run(line, shell=True, cwd=tmp_path, capture_output=True, text=True)
    assert verdict.returncode == 0, verdict.stdout + verdict.stderr
    assert "RESULT: VERIFIED" in verdict.stdout
    # Without ReportLab the report is a named skip, never a failure.
    assert re.search(
        r"^SKIP  report\.pdf: not made again: ReportLab is not installed", verdict.stdout, re.M
    )
    assert "FAIL" not in verdict.stdout

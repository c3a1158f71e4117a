"""A benchmark's figures at another revision, measured by the same script in a git worktree,
so a change is timed side by side with the code before it in one run."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def measure_at(revision: str, script: Path, args: list[str]):
    """`script`, copied into a worktree of `revision`, run there with `args`; the JSON its
    last line of output holds."""
    with tempfile.TemporaryDirectory() as scratch:
        tree = Path(scratch) / "tree"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree),
                        revision], check=True, capture_output=True)  # fmt: skip
        try:
            (tree / "bench" / script.name).write_text(script.read_text())
            done = subprocess.run(
                [sys.executable, f"bench/{script.name}", *args],
                cwd=tree, check=True, stdout=subprocess.PIPE,
            )  # fmt: skip
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)],
                           check=True)  # fmt: skip
    return json.loads(done.stdout.decode().strip().splitlines()[-1])

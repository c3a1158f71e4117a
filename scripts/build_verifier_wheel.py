"""Build the examiner's package, pathfinder-verify (audit/examiner_package.py), from this source.

    python3 scripts/build_verifier_wheel.py [--out DIR]    # prints the wheel's path and SHA-256

Needs nothing but the standard library: run it from a checkout of the commit the operator names,
and the SHA-256 it prints is the published wheel's (docs/examiner-package.md).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from audit import examiner_package  # noqa: E402  (the checkout's, not an installed one)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "dist", help="where to write it")
    out = parser.parse_args(argv).out
    wheel = examiner_package.wheel()
    out.mkdir(parents=True, exist_ok=True)
    (out / wheel.filename).write_bytes(wheel.data)
    print(f"{out / wheel.filename}\nSHA-256 {wheel.sha256}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""A real witness for tests: `python -m audit.witness` made with its own keygen and run as a
process of its own, as an independent party would run it."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

from tests.system.helpers import REPO_ROOT, describe, free_port, start_process


class WitnessProcess:
    def __init__(self, directory: Path, *, name: str, log_keys: list[str]):
        self.dir, self.name, self.log_keys = directory, name, log_keys
        directory.mkdir(parents=True, exist_ok=True)
        self.key_file = directory / "witness.key"
        made = subprocess.run(
            [sys.executable, "-m", "audit.witness", "keygen", "--name", name,
             "--out", str(self.key_file)],
            cwd=REPO_ROOT, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert made.returncode == 0, describe(made)
        self.verifier = made.stdout.strip().splitlines()[-1]
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process = None
        self.start()

    @property
    def spec(self) -> str:
        """What PATHFINDER_WITNESSES lists for it."""
        return f"{self.verifier}@{self.url}"

    def start(self) -> None:
        argv = [sys.executable, "-m", "audit.witness", "serve", "--key", str(self.key_file),
                "--state", str(self.dir / "state"), "--bind", f"127.0.0.1:{self.port}"]  # fmt: skip
        for key in self.log_keys:
            argv += ["--log", key]
        self.process = start_process(f"witness-{self.port}", argv, dict(os.environ), self.dir)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            assert self.process.alive(), self.process.tail()
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return
            except OSError:
                time.sleep(0.1)
        raise AssertionError(f"the witness did not listen\n{self.process.tail()}")

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()
            self.process = None

"""A PostgreSQL cluster and a Redis server of the fault suite's own, on free loopback ports, so a
test can stop and restart them without touching the machine's shared services."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import psycopg
import redis

from tests.system.helpers import Process, free_port, start_process


def _pg_bin(name: str) -> str:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    if not found:
        raise RuntimeError(f"PostgreSQL's {name} is not installed")
    return found[-1]


def _as_postgres(argv: list[str]) -> list[str]:
    # initdb and the server refuse to run as root.
    return ["runuser", "-u", "postgres", "--", *argv] if os.geteuid() == 0 else argv


class PrivatePostgres:
    def __init__(self):
        # Not under pytest's tmp_path: that is private to root, and the server runs as postgres.
        self.root = Path(tempfile.mkdtemp(prefix="pathfinder-faults-pg-"))
        self.data = self.root / "data"
        self.port = free_port()
        if os.geteuid() == 0:
            shutil.chown(self.root, "postgres", "postgres")
        subprocess.run(
            _as_postgres([_pg_bin("initdb"), "-D", str(self.data), "-U", "postgres",
                          "--auth=trust", "--no-sync"]),
            check=True, capture_output=True,
        )  # fmt: skip

    def url(self, database: str = "postgres", user: str = "postgres") -> str:
        return f"postgres://{user}@127.0.0.1:{self.port}/{database}"

    def _ctl(self, *args: str) -> None:
        subprocess.run(
            _as_postgres([_pg_bin("pg_ctl"), "-D", str(self.data), "-l", str(self.root / "log"),
                          "-o", f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1",
                          "-w", *args]),
            check=True, capture_output=True,
        )  # fmt: skip

    def start(self) -> None:
        self._ctl("start")

    def stop(self) -> None:
        self._ctl("stop", "-m", "fast")

    def restart(self) -> None:
        self._ctl("restart", "-m", "fast")

    def remove(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)

    def execute(self, statement: str, database: str = "postgres") -> None:
        with psycopg.connect(self.url(database), autocommit=True) as db:
            db.execute(statement)


class PrivateRedis:
    def __init__(self, log_dir: Path):
        self.port = free_port()
        self.log_dir = log_dir
        self.process: Process | None = None

    def url(self, db: int = 0) -> str:
        return f"redis://127.0.0.1:{self.port}/{db}"

    def start(self) -> None:
        self.process = start_process(
            f"redis-{time.monotonic_ns()}",
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no"],
            dict(os.environ), self.log_dir,
        )  # fmt: skip
        client = redis.Redis.from_url(self.url())
        deadline = time.monotonic() + 10
        while True:
            try:
                client.ping()
                return
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def stop(self) -> None:
        """Like a crash: nothing is saved (the machine's Redis keeps nothing on disk either)."""
        if self.process is not None:
            self.process.popen.kill()
            self.process.popen.wait(timeout=10)
            self.process = None

"""The fault suite's stack, also run by bench/chaos.py: gunicorn, two Celery workers and beat, on
a PostgreSQL cluster and a Redis server of its own (so they can be restarted), with the
application connecting as a least-privilege role (manage.py grant_app_role), as
docs/operations.md deploys it.

Timings are shortened so recovery shows within seconds: a job's lease lapses after 4 s and the
recovery sweep runs every 2 s.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
from collections.abc import Iterator
from pathlib import Path

from tests.system.helpers import (
    Stack,
    describe,
    free_port,
    last_line,
    manage,
    start_process,
    stop_all,
    wait_for_workers,
    wait_until_healthy,
)

from .servers import PrivatePostgres, PrivateRedis

APP_ROLE = "pathfinder_app"


class FaultStack(Stack):
    pg: PrivatePostgres
    redis: PrivateRedis
    owner_env: dict[str, str]
    log_dir: Path
    keys: dict[str, str]  # matter name -> API key

    def start_worker(self, name: str) -> None:
        self.processes[name] = start_process(
            name,
            [sys.executable, "-m", "celery", "-A", "pathfinder_site", "worker",
             "-n", f"{name}@{socket.gethostname()}",
             "--loglevel", "INFO"],
            self.env, self.log_dir,
        )  # fmt: skip


@contextlib.contextmanager
def running_fault_stack(
    cluster: PrivatePostgres, workdir: Path, *, matters: tuple[str, ...] = ("faults",), env=None
) -> Iterator[FaultStack]:
    """The stack on a fresh database of `cluster`, with an API key per matter (the first in
    `stack.api_key`, all in `stack.keys`); stopped and dropped afterwards."""
    database = f"faults_{os.getpid()}_{free_port()}"
    cluster.execute(f"CREATE DATABASE {database}")
    broker = PrivateRedis(workdir)
    broker.start()
    port = free_port()
    host = socket.gethostname()
    owner_env = {
        **os.environ,
        "DATABASE_URL": cluster.url(database),
        "CELERY_BROKER_URL": broker.url(0),
        "CACHE_URL": broker.url(1),
        "PATHFINDER_LOG_LEVEL": "INFO",
        # Workers batch eight jobs at once (decoding.worker.runtime), as the README's sizing shows.
        "PATHFINDER_WORKER_SEQUENCES": "8",
        "PATHFINDER_LLAMA_THREADS": "1",
        "PATHFINDER_JOB_LEASE_S": "4",
        "PATHFINDER_RECOVERY_INTERVAL_S": "2",
        "PATHFINDER_TASK_TIME_LIMIT": "300",
        "PATHFINDER_VAR_DIR": str(workdir / "var"),
        "PATHFINDER_RATE_LIMIT": "100000/minute",
        **(env or {}),
    }
    migrated = manage(owner_env, "migrate", "--noinput")
    assert migrated.returncode == 0, describe(migrated)
    granted = manage(owner_env, "grant_app_role", APP_ROLE)
    assert granted.returncode == 0, describe(granted)
    app_env = {**owner_env, "DATABASE_URL": cluster.url(database, user=APP_ROLE)}
    stack = FaultStack(
        base_url=f"http://127.0.0.1:{port}",
        api_key="",
        env=app_env,
        database=database,
        database_url=cluster.url(database),  # the owner's: tests read as superuser
        worker_names=[f"w1@{host}", f"w2@{host}"],
    )
    stack.pg, stack.redis, stack.owner_env, stack.log_dir = cluster, broker, owner_env, workdir
    try:
        stack.keys = {
            matter: last_line(manage(app_env, "create_api_key", "--matter", matter, "tests"))
            for matter in matters
        }
        stack.api_key = stack.keys[matters[0]]
        stack.processes["gunicorn"] = start_process(
            "gunicorn",
            [sys.executable, "-m", "gunicorn", "pathfinder_site.wsgi:application",
             "--bind", f"127.0.0.1:{port}", "--workers", "1"],
            app_env, workdir,
        )  # fmt: skip
        stack.start_worker("w1")
        stack.start_worker("w2")
        stack.processes["beat"] = start_process(
            "beat",
            [sys.executable, "-m", "celery", "-A", "pathfinder_site", "beat", "--schedule",
             str(workdir / "beat-schedule"), "--loglevel", "INFO"],
            app_env, workdir,
        )  # fmt: skip
        wait_until_healthy(stack.base_url, list(stack.processes.values()))
        wait_for_workers(stack)
        yield stack
    finally:
        stop_all(list(stack.processes.values()))
        broker.stop()
        cluster.execute(f"DROP DATABASE IF EXISTS {database} WITH (FORCE)")

"""The fault suite's stack: gunicorn, two Celery workers and beat, on a PostgreSQL cluster and a
Redis server of its own (so a test may restart them), with the application connecting as a
least-privilege role (manage.py grant_app_role), as docs/operations.md deploys it.

Timings are shortened so recovery shows within seconds: a job's lease lapses after 4 s and the
recovery sweep runs every 2 s.
"""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Iterator

import pytest

from tests.system.helpers import (
    Stack,
    attach_stack_logs,
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


@pytest.fixture(scope="session")
def postgres_cluster() -> Iterator[PrivatePostgres]:
    cluster = PrivatePostgres()
    try:
        cluster.start()
        cluster.execute(f"CREATE ROLE {APP_ROLE} LOGIN")
        yield cluster
        cluster.stop()
    finally:
        cluster.remove()


class FaultStack(Stack):
    pg: PrivatePostgres
    redis: PrivateRedis
    owner_env: dict[str, str]

    def start_worker(self, name: str) -> None:
        self.processes[name] = start_process(
            name,
            [sys.executable, "-m", "celery", "-A", "pathfinder_site", "worker", "--concurrency",
             "1", "--pool", "prefork", "-n", f"{name}@{socket.gethostname()}",
             "--loglevel", "INFO"],
            self.env, self.log_dir,
        )  # fmt: skip


@pytest.fixture
def fault_stack(postgres_cluster, tmp_path) -> Iterator[FaultStack]:
    database = f"faults_{os.getpid()}_{free_port()}"
    postgres_cluster.execute(f"CREATE DATABASE {database}")
    broker = PrivateRedis(tmp_path)
    broker.start()
    port = free_port()
    host = socket.gethostname()
    owner_env = {
        **os.environ,
        "DATABASE_URL": postgres_cluster.url(database),
        "CELERY_BROKER_URL": broker.url(0),
        "CACHE_URL": broker.url(1),
        "PATHFINDER_LOG_LEVEL": "INFO",
        "PATHFINDER_LLAMA_THREADS": "1",
        "PATHFINDER_JOB_LEASE_S": "4",
        "PATHFINDER_RECOVERY_INTERVAL_S": "2",
        "PATHFINDER_REQUEUE_AFTER_S": "6",
        "PATHFINDER_TASK_TIME_LIMIT": "300",
        "PATHFINDER_VAR_DIR": str(tmp_path / "var"),
        "PATHFINDER_RATE_LIMIT": "100000/minute",
    }
    migrated = manage(owner_env, "migrate", "--noinput")
    assert migrated.returncode == 0, describe(migrated)
    granted = manage(owner_env, "grant_app_role", APP_ROLE)
    assert granted.returncode == 0, describe(granted)
    env = {**owner_env, "DATABASE_URL": postgres_cluster.url(database, user=APP_ROLE)}
    stack = FaultStack(
        base_url=f"http://127.0.0.1:{port}",
        api_key="",
        env=env,
        database=database,
        database_url=postgres_cluster.url(database),  # the owner's: tests read as superuser
        worker_names=[f"w1@{host}", f"w2@{host}"],
    )
    stack.pg, stack.redis, stack.owner_env, stack.log_dir = (
        postgres_cluster,
        broker,
        owner_env,
        tmp_path,
    )
    try:
        stack.api_key = last_line(manage(env, "create_api_key", "--matter", "faults", "tests"))
        stack.processes["gunicorn"] = start_process(
            "gunicorn",
            [sys.executable, "-m", "gunicorn", "pathfinder_site.wsgi:application",
             "--bind", f"127.0.0.1:{port}", "--workers", "1"],
            env, tmp_path,
        )  # fmt: skip
        stack.start_worker("w1")
        stack.start_worker("w2")
        stack.processes["beat"] = start_process(
            "beat",
            [sys.executable, "-m", "celery", "-A", "pathfinder_site", "beat", "--schedule",
             str(tmp_path / "beat-schedule"), "--loglevel", "INFO"],
            env, tmp_path,
        )  # fmt: skip
        wait_until_healthy(stack.base_url, list(stack.processes.values()))
        wait_for_workers(stack)
        yield stack
    finally:
        stop_all(list(stack.processes.values()))
        broker.stop()
        postgres_cluster.execute(f"DROP DATABASE IF EXISTS {database} WITH (FORCE)")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """On a failure, attach the tail of every stack process's log to the test's report."""
    report = yield
    stack = getattr(item, "funcargs", {}).get("fault_stack")
    if report.failed and isinstance(stack, Stack):
        attach_stack_logs(report, stack, lines=80)
    return report

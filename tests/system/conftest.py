"""System-test fixtures: real gunicorn and Celery processes against a database of their own.

Black-box on purpose: nothing here uses pytest-django's `db` fixtures (the audit tables reject
TRUNCATE, so its flush would fail). The stack gets a fresh database, its own Celery queue and
its own log files.
"""

from __future__ import annotations

import os
import secrets
import socket
import sys
from collections.abc import Iterator

import pytest

from .helpers import (
    Stack,
    attach_stack_logs,
    broker_url,
    create_database,
    describe,
    drop_database,
    forget_queue,
    free_port,
    last_line,
    postgres_url,
    start_process,
    stop_all,
    wait_for_workers,
    wait_until_healthy,
)


@pytest.fixture(scope="session")
def postgres_stack(tmp_path_factory) -> Iterator[Stack]:
    suffix = secrets.token_hex(4)
    database = f"pathfinder_sys_{suffix}"
    admin_url = create_database(database)
    database_url = postgres_url(database)
    signing_dir = tmp_path_factory.mktemp("system-signing")
    env = {
        **os.environ,
        "DATABASE_URL": database_url,
        "CELERY_BROKER_URL": broker_url(),
        # The stack's own log key and published checkpoints, never those of the checkout's var/
        # (a `make run` there signs checkpoints of another log).
        "PATHFINDER_CHECKPOINT_KEY_FILE": str(signing_dir / "signing.key"),
        "PATHFINDER_CHECKPOINT_PUBLISH_DIR": str(signing_dir / "published"),
        # A queue of its own, so no other worker on this Redis takes the stack's jobs.
        "PATHFINDER_TASK_QUEUE": f"pathfinder-test-{suffix}",
        "PATHFINDER_LOG_LEVEL": "WARNING",
        # Workers batch eight jobs at once (decoding.worker.runtime), as the README's sizing shows.
        "PATHFINDER_WORKER_SEQUENCES": "8",
        "PATHFINDER_DEFAULT_MODEL": "stub",
        # The schema fuzzer sends hundreds of requests a minute; the throttle has its own test.
        "PATHFINDER_RATE_LIMIT": "100000/minute",
    }
    log_dir = tmp_path_factory.mktemp("system-stack")
    port = free_port()
    host = socket.gethostname()
    stack = Stack(
        base_url=f"http://127.0.0.1:{port}",
        api_key="",
        env=env,
        database=database,
        database_url=database_url,
        worker_names=[f"w1-{suffix}@{host}", f"w2-{suffix}@{host}"],
    )
    try:
        migrated = stack.manage("migrate", "--noinput")
        assert migrated.returncode == 0, describe(migrated)
        stack.api_key = last_line(
            stack.manage("create_api_key", "--matter", "system-tests", "tests")
        )
        stack.other_api_key = last_line(
            stack.manage("create_api_key", "--matter", "other-matter", "tests")
        )
        # The production shape: gunicorn behind the buffering front, which alone takes clients.
        web_port = free_port()
        stack.processes["gunicorn"] = start_process(
            "gunicorn",
            [
                sys.executable, "-m", "gunicorn", "pathfinder_site.wsgi:application",
                "--bind", f"127.0.0.1:{web_port}", "--workers", "2",
            ],
            {**env, "PATHFINDER_TRUSTED_PROXIES": "127.0.0.1"},
            log_dir,
        )  # fmt: skip
        stack.processes["front"] = start_process(
            "front",
            [
                sys.executable, "-m", "pathfinder_site.front", "--bind", f"127.0.0.1:{port}",
                "--upstream", f"127.0.0.1:{web_port}",
            ],
            env,
            log_dir,
        )  # fmt: skip
        for name in stack.worker_names:
            short = name.split("-")[0]
            stack.processes[short] = start_process(
                short,
                [
                    sys.executable, "-m", "celery", "-A", "pathfinder_site", "worker",
                    "-n", name, "--loglevel", "INFO",
                ],
                env,
                log_dir,
            )  # fmt: skip
        wait_until_healthy(stack.base_url, list(stack.processes.values()))
        wait_for_workers(stack)
        yield stack
    finally:
        stop_all(list(stack.processes.values()))
        drop_database(admin_url, database)
        forget_queue(env["CELERY_BROKER_URL"], env["PATHFINDER_TASK_QUEUE"])


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """On a failure, attach the tail of every stack process's log to the test's report."""
    report = yield
    stacks = [v for v in getattr(item, "funcargs", {}).values() if isinstance(v, Stack)]
    if report.failed:
        for stack in stacks:
            attach_stack_logs(report, stack)
    return report

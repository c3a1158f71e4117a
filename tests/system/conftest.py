"""System-test fixtures: real gunicorn and Celery processes against a database of their own.

Black-box on purpose: nothing here uses pytest-django's `db` fixtures (the audit tables reject
TRUNCATE, so its flush would fail). The stack gets a fresh database, its own Celery queue and
its own log files.
"""

from __future__ import annotations

import secrets
import socket
import sys
from collections.abc import Iterator

import pytest

from .helpers import (
    Stack,
    attach_stack_logs,
    create_database,
    describe,
    drop_database,
    forget_queue,
    free_port,
    isolated_env,
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
        **isolated_env(database, suffix, signing_dir),
        # Workers batch eight jobs at once (decoding.worker.runtime), as the README's sizing shows.
        "PATHFINDER_WORKER_SEQUENCES": "8",
        "PATHFINDER_DEFAULT_MODEL": "stub",
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

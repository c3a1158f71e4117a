"""The fault suite's fixtures: a PostgreSQL cluster of its own for the session, and for each
test the stack of tests/faults/stack.py on a fresh database of it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.system.helpers import Stack, attach_stack_logs

from .servers import PrivatePostgres
from .stack import APP_ROLE, FaultStack, running_fault_stack


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


@pytest.fixture
def fault_stack(postgres_cluster, tmp_path) -> Iterator[FaultStack]:
    with running_fault_stack(postgres_cluster, tmp_path) as stack:
        yield stack


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """On a failure, attach the tail of every stack process's log to the test's report."""
    report = yield
    stack = getattr(item, "funcargs", {}).get("fault_stack")
    if report.failed and isinstance(stack, Stack):
        attach_stack_logs(report, stack, lines=80)
    return report

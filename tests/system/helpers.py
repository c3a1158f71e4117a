"""Helpers for the system tests: run manage.py, start and stop real processes, talk HTTP.

Processes write to log files, never pipes, so a chatty process cannot block on a full pipe.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urljoin, urlsplit, urlunsplit

import psycopg
import pytest
import redis
import requests
from psycopg import sql

REPO_ROOT = Path(__file__).resolve().parents[2]
STARTUP_TIMEOUT_S = 60
DEFAULT_POSTGRES_URL = "postgres://postgres@127.0.0.1:5432/postgres"
DEFAULT_BROKER_URL = "redis://127.0.0.1:6379/0"
FINISHED = {"succeeded", "failed", "cancelled"}


# --- processes ------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def manage(env: dict[str, str], *args: str, timeout: float = 120, cwd: Path = REPO_ROOT):
    """Run `manage.py <args>` to completion; returns the CompletedProcess (text, captured)."""
    return subprocess.run(
        [sys.executable, str(REPO_ROOT / "manage.py"), *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def last_line(completed: subprocess.CompletedProcess) -> str:
    assert completed.returncode == 0, describe(completed)
    return completed.stdout.strip().splitlines()[-1].strip()


def describe(completed: subprocess.CompletedProcess) -> str:
    return (
        f"{' '.join(map(str, completed.args))} exited {completed.returncode}\n"
        f"--- stdout ---\n{completed.stdout}\n--- stderr ---\n{completed.stderr}"
    )


@dataclass
class Process:
    """A long-running child in its own session, so stopping it also reaches its children."""

    name: str
    popen: subprocess.Popen
    log_path: Path

    def alive(self) -> bool:
        return self.popen.poll() is None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def tail(self, lines: int = 60) -> str:
        return "\n".join(self.log().splitlines()[-lines:])

    def terminate(self) -> None:
        if self.alive():
            self.popen.send_signal(signal.SIGTERM)

    def stop(self, timeout: float = 20) -> int | None:
        """SIGTERM, wait, then SIGKILL the whole process group. Returns the exit status, or None
        when it had to be killed."""
        self.terminate()
        try:
            code = self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            code = None
        # Stragglers (gunicorn or Celery pool children) share the group we created.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.popen.pid, signal.SIGKILL)
        if self.alive():
            self.popen.wait(timeout=10)
        return code


def stop_all(processes: list[Process], timeout: float = 20) -> None:
    """Signal every process first, so they shut down side by side rather than one by one."""
    for process in processes:
        process.terminate()
    deadline = time.monotonic() + timeout
    for process in processes:
        process.stop(timeout=max(0.1, deadline - time.monotonic()))


def start_process(
    name: str, argv: list[str], env: dict[str, str], log_dir: Path, cwd: Path = REPO_ROOT
) -> Process:
    log_path = log_dir / f"{name}.log"
    with open(log_path, "wb") as log_file:  # the child keeps its own copy of the descriptor
        popen = subprocess.Popen(
            argv,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return Process(name=name, popen=popen, log_path=log_path)


def start_web_and_front(
    name: str, env: dict[str, str], log_dir: Path
) -> tuple[Process, int, Process, int]:
    """One gunicorn web process (gunicorn.conf.py) and the front before it, as `manage.py serve`
    runs them: (gunicorn, its port, the front, its port)."""
    web_port, front_port = free_port(), free_port()
    web = start_process(
        f"gunicorn-{name}",
        [sys.executable, "-m", "gunicorn", "pathfinder_site.wsgi:application", "--bind",
         f"127.0.0.1:{web_port}", "--workers", "1", "--config", "gunicorn.conf.py"],
        {**env, "PATHFINDER_TRUSTED_PROXIES": "127.0.0.1"}, log_dir,
    )  # fmt: skip
    front = start_process(
        f"front-{name}",
        [sys.executable, "-m", "pathfinder_site.front", "--bind", f"127.0.0.1:{front_port}",
         "--upstream", f"127.0.0.1:{web_port}"],
        env, log_dir,
    )  # fmt: skip
    return web, web_port, front, front_port


def wait_until_healthy(base_url: str, processes: list[Process], timeout: float = STARTUP_TIMEOUT_S):
    deadline = time.monotonic() + timeout
    last_error = None
    while time.monotonic() < deadline:
        for process in processes:
            if not process.alive():
                raise AssertionError(
                    f"{process.name} exited with {process.popen.returncode} before /healthz "
                    f"answered\n{process.tail()}"
                )
        try:
            response = requests.get(f"{base_url}/healthz", timeout=2)
            if response.status_code == 200:
                return
            last_error = f"HTTP {response.status_code}: {response.text[:200]}"
        except requests.RequestException as exc:
            last_error = repr(exc)
        time.sleep(0.2)
    tails = "\n".join(f"--- {p.name} ---\n{p.tail()}" for p in processes)
    raise AssertionError(f"/healthz not 200 within {timeout}s ({last_error})\n{tails}")


# --- the PostgreSQL + Redis stack -----------------------------------------------------------------


def postgres_url(database: str) -> str:
    """The URL of `database` on the server the test run points at (DATABASE_URL, if PostgreSQL)."""
    base = os.environ.get("DATABASE_URL", "")
    if not base.startswith(("postgres://", "postgresql://")):
        base = DEFAULT_POSTGRES_URL
    return urlunsplit(urlsplit(base)._replace(path=f"/{database}", query=""))


def broker_url() -> str:
    url = os.environ.get("CELERY_BROKER_URL", "")
    return url if url.startswith(("redis://", "rediss://")) else DEFAULT_BROKER_URL


def isolated_env(database: str, suffix: str, signing_dir: Path) -> dict[str, str]:
    """The environment of a test stack's processes, apart from every other stack's: a database,
    a log key and published checkpoints, and a queue of its own."""
    return {
        **os.environ,
        "DATABASE_URL": postgres_url(database),
        "CELERY_BROKER_URL": broker_url(),
        # The stack's own log key and published checkpoints, never those of the checkout's var/
        # (a `make run` there signs checkpoints of another log).
        "PATHFINDER_CHECKPOINT_KEY_FILE": str(signing_dir / "signing.key"),
        "PATHFINDER_CHECKPOINT_PUBLISH_DIR": str(signing_dir / "published"),
        # A queue of its own, so no other worker on this Redis takes the stack's jobs.
        "PATHFINDER_TASK_QUEUE": f"pathfinder-test-{suffix}",
        "PATHFINDER_LOG_LEVEL": "WARNING",
        # Tests send requests faster than a client would; the throttle has its own test.
        "PATHFINDER_RATE_LIMIT": "100000/minute",
    }


@dataclass
class Stack:
    base_url: str
    api_key: str
    env: dict[str, str]
    other_api_key: str = ""
    database: str = ""
    database_url: str = ""
    worker_names: list[str] = field(default_factory=list)
    processes: dict[str, Process] = field(default_factory=dict)

    def manage(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        return manage(self.env, *args, timeout=timeout)

    def copy_spec(self, source: str, name: str, **fields) -> str:
        """Save a copy of model spec `source` as `name`, with `fields` changed; returns name."""
        changes = "".join(f"s.{field} = {value!r}; " for field, value in fields.items())
        created = self.manage(
            "shell",
            "-c",
            "from decoding.models import ModelSpec; "
            f"s = ModelSpec.objects.get(name={source!r}); s.pk = None; s.name = {name!r}; "
            f"{changes}s.save()",
        )
        assert created.returncode == 0, describe(created)
        return name

    def url(self, path_or_url: str) -> str:
        return urljoin(self.base_url + "/", path_or_url)

    def celery(self, *args: str, timeout: float = 30) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "celery", "-A", "pathfinder_site", *args],
            cwd=REPO_ROOT,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def inspect(self, command: str) -> dict:
        """`celery inspect <command>` addressed to this stack's workers only, as JSON."""
        completed = self.celery(
            "inspect", command, "--json", "--timeout", "2", "-d", ",".join(self.worker_names)
        )
        if completed.returncode != 0:
            return {}
        return json.loads(completed.stdout.strip().splitlines()[-1])

    def log_tails(self) -> str:
        return "\n".join(f"--- {p.name} ---\n{p.tail()}" for p in self.processes.values())


def attach_stack_logs(report, stack: Stack, lines: int = 60) -> None:
    """Append the tail of every stack process's log to a failed test's report."""
    for process in stack.processes.values():
        report.sections.append((f"{process.name} log ({process.log_path})", process.tail(lines)))


def wait_for_workers(stack: Stack, timeout: float = STARTUP_TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout
    replies: dict = {}
    while time.monotonic() < deadline:
        for process in stack.processes.values():
            if not process.alive():
                raise AssertionError(f"{process.name} exited early\n{process.tail()}")
        replies = stack.inspect("ping")
        if set(stack.worker_names) <= set(replies):
            return
        time.sleep(0.5)
    raise AssertionError(
        f"workers {stack.worker_names} did not all answer ping within {timeout}s "
        f"(got {sorted(replies)})\n{stack.log_tails()}"
    )


# --- HTTP helpers -----------------------------------------------------------------------------


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def submit(stack: Stack, body: dict, key: str | None = None) -> requests.Response:
    return requests.post(
        stack.url("/api/v1/generations"),
        json=body,
        headers=auth(key or stack.api_key),
        timeout=30,
    )


def get(stack: Stack, path_or_url: str, key: str | None = None) -> requests.Response:
    return requests.get(stack.url(path_or_url), headers=auth(key or stack.api_key), timeout=30)


def wait_for(stack: Stack, job_id: str, timeout: float = 60, key: str | None = None) -> dict:
    """Poll the job until it succeeds or fails; returns its last representation."""
    deadline = time.monotonic() + timeout
    job: dict = {}
    while time.monotonic() < deadline:
        response = get(stack, f"/api/v1/generations/{job_id}", key)
        assert response.status_code == 200, response.text
        job = response.json()
        if job["status"] in FINISHED:
            return job
        time.sleep(0.1)
    raise AssertionError(f"job {job_id} still {job.get('status')!r} after {timeout}s: {job}")


def create_database(database: str) -> str:
    """Create a database of the test's own on this machine's PostgreSQL; return the admin URL
    (the `postgres` database) that drops it afterwards."""
    admin_url = postgres_url("postgres")
    try:
        admin = psycopg.connect(admin_url, autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as exc:
        pytest.fail(f"these tests need PostgreSQL at {admin_url}: {exc}")
    with admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(database)))
    return admin_url


def drop_database(admin_url: str, database: str) -> None:
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(database))
        )


def forget_queue(broker: str, queue: str) -> None:
    """Delete the Redis keys kombu keeps for a stack's queue (the name is unique to the run)."""
    client = redis.Redis.from_url(broker)
    try:
        keys = list(client.scan_iter(match=f"*{queue}*"))
        if keys:
            client.delete(*keys)
    finally:
        client.close()


# --- The edge's attacks (test_edge_attacks.py, bench/edge.py) ---------------------------------


def tree_rss(pid: int) -> int:
    """Resident bytes of the largest process in pid's tree (a master and its workers)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
                children.setdefault(ppid, []).append(int(entry.name))
    largest, todo = 0, [pid]
    while todo:
        current = todo.pop()
        todo += children.get(current, [])
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{current}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    largest = max(largest, int(line.split()[1]) * 1024)
    return largest


class RssWatch:
    """The most resident memory any watched process tree reached while the block ran."""

    def __init__(self, pids: dict[str, int]):
        self.pids, self.most = pids, dict.fromkeys(pids, 0)
        self.stopping = threading.Event()

    def __enter__(self):
        self.thread = threading.Thread(target=self._watch, daemon=True)
        self.thread.start()
        return self

    def _watch(self):
        while not self.stopping.wait(0.05):
            for name, pid in self.pids.items():
                self.most[name] = max(self.most[name], tree_rss(pid))

    def __exit__(self, *exc):
        self.stopping.set()
        self.thread.join()


def batch_file_of(size: int) -> bytes:
    """A valid batch input of about `size` bytes (unique custom_ids, chat requests)."""
    lines, total, number = [], 0, 0
    while total < size:
        line = json.dumps({
            "custom_id": f"r{number}", "method": "POST", "url": "/v1/chat/completions",
            "body": {"model": "smollm2-135m-instruct", "max_tokens": 4,
                     "messages": [{"role": "user", "content": "x" * 900}]},
        }) + "\n"  # fmt: skip
        lines.append(line)
        total += len(line)
        number += 1
    return "".join(lines).encode()


def stalled_download(port: int, path: str, key: str) -> socket.socket:
    """A client that asks for a download and then reads nothing."""
    connection = socket.socket()
    connection.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    connection.connect(("127.0.0.1", port))
    connection.sendall(
        f"GET {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\n\r\n".encode()
    )
    return connection


def received_until_closed(connection: socket.socket, most: int) -> int:
    """Read what the socket still holds, fast, until the edge's close (or `most` bytes)."""
    connection.settimeout(5)
    total = 0
    with contextlib.suppress(OSError):
        while total < most and (data := connection.recv(1 << 20)):
            total += len(data)
    connection.close()
    return total

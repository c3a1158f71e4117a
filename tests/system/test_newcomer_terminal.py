"""What a newcomer's terminal shows (issue 45 item 5): `make run BIND=host:port` serves there,
says it is loading the model and then how long it took to be ready, answers /readyz's probes
while loading without logging them as errors, and stops on Ctrl-C with no traceback and no
ERROR line; an address already in use is named in one line, before anything starts.

`make run` as a newcomer types it, with the log level it ships with (INFO), in an installation
directory of its own (PATHFINDER_VAR_DIR), on the embedded default (SQLite, the filesystem
queue, the default model)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time

import pytest
import requests

from .helpers import REPO_ROOT, free_port

pytestmark = [pytest.mark.system, pytest.mark.timeout(300)]

UNSET = ("DATABASE_URL", "CELERY_BROKER_URL", "CACHE_URL", "PATHFINDER_TASK_QUEUE",
         "PATHFINDER_QUEUE_DIR", "PATHFINDER_SECRET_KEY", "PATHFINDER_LOG_LEVEL")  # fmt: skip
# What must never reach a newcomer's terminal, from start to Ctrl-C.
NOISE = ("Traceback", '"level": "ERROR"', "AXES: BEGIN", "No hostname was supplied")


@pytest.fixture
def newcomer_env(tmp_path) -> dict[str, str]:
    env = {name: value for name, value in os.environ.items() if name not in UNSET}
    return env | {"PATHFINDER_VAR_DIR": str(tmp_path / "var")}


def make_run(bind: str, env: dict[str, str], log) -> subprocess.Popen:
    # Its own process group, as a terminal's foreground job: Ctrl-C signals all of it.
    return subprocess.Popen(
        ["make", "--no-print-directory", "run", f"BIND={bind}"],
        cwd=REPO_ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def test_a_busy_address_is_named_in_one_line_before_anything_starts(newcomer_env, tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        bind = f"127.0.0.1:{taken.getsockname()[1]}"
        with open(tmp_path / "run.log", "wb") as log:
            code = make_run(bind, newcomer_env, log).wait(timeout=240)
    output = (tmp_path / "run.log").read_text()
    assert code != 0
    assert f"CommandError: {bind} is in use" in output and "BIND=" in output
    assert "Serving on" not in output and "Traceback" not in output, output


def test_make_run_serves_at_bind_says_when_ready_and_stops_quietly(newcomer_env, tmp_path):
    bind = f"127.0.0.1:{free_port()}"
    log_path = tmp_path / "run.log"
    with open(log_path, "wb") as log:
        run = make_run(bind, newcomer_env, log)
    try:
        probes = []
        deadline = time.monotonic() + 240
        while "Ready in" not in log_path.read_text() and time.monotonic() < deadline:
            assert run.poll() is None, log_path.read_text()
            with contextlib.suppress(requests.ConnectionError):  # a balancer's probes
                probes.append(requests.get(f"http://{bind}/readyz", timeout=5).status_code)
            time.sleep(1)
        output = log_path.read_text()
        assert "Ready in" in output, output
        assert f"Serving on http://{bind}/" in output and "Loading the model" in output
        assert 503 in probes, probes  # it was probed while loading
        # /readyz answers from a report a few seconds old (PATHFINDER_OPS_CACHE_S).
        for _ in range(30):
            if requests.get(f"http://{bind}/readyz", timeout=10).status_code == 200:
                break
            time.sleep(1)
        else:
            raise AssertionError("/readyz never said ready after serve did")
        key = (tmp_path / "var" / "local-api-key").read_text().strip()
        models = requests.get(
            f"http://{bind}/v1/models", headers={"Authorization": f"Bearer {key}"}, timeout=10
        )
        assert models.status_code == 200 and models.json()["data"], models.text
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGINT)  # Ctrl-C
        code = run.wait(timeout=60)
    output = log_path.read_text()
    assert [noise for noise in NOISE if noise in output] == [], output
    # make itself takes the Ctrl-C (-SIGINT) or reports its interrupted recipe (2).
    assert code in (0, 2, -signal.SIGINT), output

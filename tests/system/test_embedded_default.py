"""The embedded default: no DATABASE_URL, no broker; `manage.py serve` on SQLite and kombu's
filesystem transport, everything under PATHFINDER_VAR_DIR."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from contextlib import closing

import pytest
import requests

from .helpers import (
    REPO_ROOT,
    Stack,
    auth,
    describe,
    free_port,
    last_line,
    manage,
    start_process,
    submit,
    wait_for,
    wait_until_healthy,
)

pytestmark = [pytest.mark.system, pytest.mark.timeout(240)]

UNSET = ("DATABASE_URL", "CELERY_BROKER_URL", "PATHFINDER_TASK_QUEUE", "PATHFINDER_QUEUE_DIR",
         "PATHFINDER_SECRET_KEY")  # fmt: skip


def test_the_embedded_default_serves_a_job_on_sqlite_and_the_filesystem_queue(tmp_path):
    var_dir = tmp_path / "var"
    var_dir.mkdir()
    # `serve` runs from a folder of its own, so anything it writes relative to its working
    # directory shows up there (and not in the repository).
    workdir = tmp_path / "cwd"
    workdir.mkdir()
    env = {name: value for name, value in os.environ.items() if name not in UNSET}
    env |= {
        "PATHFINDER_VAR_DIR": str(var_dir),
        "PATHFINDER_LOG_LEVEL": "WARNING",
        "PATHFINDER_METRICS_TOKEN": "embedded-ops-token",
        "PATHFINDER_OPS_CACHE_S": "0",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")])),
    }

    migrated = manage(env, "migrate", "--noinput")
    assert migrated.returncode == 0, describe(migrated)
    # As `make run`: the first run makes the installation's own secret key (and the rest).
    bootstrapped = manage(env, "bootstrap_local")
    assert bootstrapped.returncode == 0, describe(bootstrapped)
    secret = var_dir / "secret-key"
    assert secret.stat().st_mode & 0o777 == 0o600 and len(secret.read_text().strip()) >= 50
    api_key = last_line(manage(env, "create_api_key", "--matter", "embedded", "k"))
    port = free_port()
    serve = start_process(
        "serve",
        [sys.executable, str(REPO_ROOT / "manage.py"), "serve", "--bind", f"127.0.0.1:{port}"],
        env,
        tmp_path,
        cwd=workdir,
    )
    try:
        stack = Stack(base_url=f"http://127.0.0.1:{port}", api_key=api_key, env=env)
        wait_until_healthy(stack.base_url, [serve])
        token = {"Authorization": f"Bearer {env['PATHFINDER_METRICS_TOKEN']}"}
        # Ready once the worker has loaded its models, at its start, not at the first job.
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            ready = requests.get(stack.url("/readyz"), headers=token, timeout=30)
            if ready.status_code == 200:
                break
            time.sleep(0.5)
        assert ready.status_code == 200, f"{ready.text}\n{serve.tail()}"
        models = ready.json()["checks"]["workers"]["models"]
        assert list(models.values()) == [{"processes": 1, "loaded": 1}], models

        # What `make run` serves: the default model, SmolLM2-135M-Instruct in llama.cpp.
        body = {"prompt": "The three primary colours are", "max_tokens": 16, "temperature": 0}
        response = submit(stack, body)
        assert response.status_code == 202, f"{response.text}\n{serve.tail()}"
        job = wait_for(stack, response.json()["id"], timeout=120)
        assert job["status"] == "succeeded", f"{job}\n{serve.tail()}"
        assert job["model"] == "smollm2-135m-instruct"
        assert job["output_text"].strip(), job
        assert job["timings"]["load_ms"] == 0, job["timings"]  # the first job finds them warm

        # The embedded worker decodes several jobs at once (PATHFINDER_WORKER_SEQUENCES, 8 by
        # default) on SQLite: four sent together all succeed, decoded at the same time.
        bodies = [{"prompt": f"Name {n} rivers in Europe:", "max_tokens": 24} for n in range(2, 6)]
        sent = [submit(stack, b) for b in bodies]
        assert all(r.status_code == 202 for r in sent), [r.text for r in sent]
        together = [wait_for(stack, r.json()["id"], timeout=120) for r in sent]
        assert all(j["status"] == "succeeded" for j in together), f"{together}\n{serve.tail()}"
        spans = sorted((j["started_at"], j["finished_at"]) for j in together)
        assert any(
            later[0] < earlier[1] for earlier, later in zip(spans, spans[1:], strict=False)
        ), spans

        checked = manage(env, "verify_chain", "--all")
        assert checked.returncode == 0, describe(checked)

        # The portal's search on SQLite: every word, in the prompt or the answer.
        answer_word = max(job["output_text"].split(), key=len).strip(".,;:!?")
        for words, found in (("primary COLOURS", True), (answer_word, True), ("zebra", False)):
            searched = manage(
                env,
                "shell",
                "-c",
                "from django.contrib.auth.models import User; "
                "from decoding.models import Matter; "
                "from reviewers.models import MatterGrant; "
                "from reviewers.selectors import JobFilters, job_list; "
                "u, _ = User.objects.get_or_create(username='rita'); "
                "m = Matter.objects.get(name='embedded'); "
                "MatterGrant.objects.get_or_create(user=u, matter=m); "
                f"page = job_list(user=u, filters=JobFilters(q={words!r})); "
                "print([str(j.id) for j in page.rows])",
            )
            assert searched.returncode == 0, describe(searched)
            assert (job["id"] in searched.stdout) is found, (words, searched.stdout)

        # A matter's bundle from SQLite verifies offline like one from PostgreSQL.
        signed = manage(env, "checkpoint")
        assert signed.returncode == 0, describe(signed)
        bundle = tmp_path / "embedded-matter.zip"
        exported = manage(env, "export_matter", "--matter", "embedded", "--out", str(bundle))
        assert exported.returncode == 0, describe(exported)
        verifier_key = (var_dir / "checkpoint-signing.key").read_text().split()[1]
        offline = subprocess.run(
            [
                sys.executable,
                "-m",
                "audit.offline_verify",
                str(bundle),
                "--key",
                verifier_key,
            ],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert offline.returncode == 0, offline.stdout + offline.stderr

        # Operators' endpoints work on the embedded default too: its worker answers the
        # readiness ping over the filesystem queue, and /metrics sees the worker's counters.
        # The ping has a second to come back over the filesystem transport, which a worker
        # still busy polling may miss: readiness is asked a few times, as a probe would.
        for _ in range(10):
            ready = requests.get(stack.url("/readyz"), headers=token, timeout=30)
            if (
                ready.status_code == 200
                and None not in ready.json()["checks"]["workers"]["slots"].values()
            ):
                break
        assert ready.status_code == 200, ready.text
        workers = ready.json()["checks"]["workers"]
        assert workers["count"] == 1
        # Each worker's slots: the embedded worker decodes up to 8 jobs at once, idle by now.
        assert list(workers["slots"].values()) == [{"slots": 8, "busy": 0}], workers
        public = requests.get(stack.url("/readyz"), timeout=30)
        assert set(public.json()) == {"ready"}  # nothing more without the token
        metrics = requests.get(stack.url("/metrics"), headers=token, timeout=30).text
        assert 'pathfinder_jobs{status="succeeded"} 5.0' in metrics
        assert "pathfinder_decode_steps_total" in metrics

        # The SQLite triggers keep audit rows append-only, even for a direct connection.
        with closing(sqlite3.connect(var_dir / "pathfinder.sqlite3", timeout=30)) as db:
            for statement in (
                "UPDATE audit_decisionrecord SET payload = 'x'",
                "DELETE FROM audit_decisionrecord",
            ):
                with pytest.raises(sqlite3.DatabaseError, match="append-only"):
                    db.execute(statement)
            assert db.execute("SELECT COUNT(*) FROM audit_decisionrecord").fetchone()[0] >= 1

        # Ctrl-C of `make run` with a caller waiting: the terminal sends SIGINT to the whole
        # foreground group. The caller gets a 503 at once and its job is cancelled, never re-run.
        answer: dict = {}

        def caller():
            long = {"prompt": "Tell a long story about a lighthouse.", "max_tokens": 1024,
                    "ignore_eos": True}  # fmt: skip
            response = requests.post(stack.url("/v1/completions"), json=long,
                                     headers=auth(api_key), timeout=60)  # fmt: skip
            answer.update(status=response.status_code, body=response.json(),
                          job=response.headers.get("X-Pathfinder-Job"))  # fmt: skip

        waiting = threading.Thread(target=caller)
        waiting.start()
        # Stop while its job decodes: a fixed wait is a race, since a long story that repeats
        # itself is copied by the drafter and 1,024 tokens can come in a few seconds.
        deadline = time.monotonic() + 30
        with closing(sqlite3.connect(var_dir / "pathfinder.sqlite3", timeout=30)) as db:
            while not db.execute(
                "SELECT 1 FROM decoding_generationjob WHERE status = 'running'"
            ).fetchone():
                assert time.monotonic() < deadline, "the long job never started"
                time.sleep(0.05)
        time.sleep(0.5)  # a few of its steps decoded
        stopped_at = time.monotonic()
        os.killpg(serve.popen.pid, signal.SIGINT)
        try:
            code = serve.popen.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pytest.fail(f"serve did not exit within 30 s of Ctrl-C\n{serve.tail()}")
        waiting.join(timeout=10)
        assert code == 0, f"serve exited {code} after Ctrl-C\n{serve.tail()}"
        assert time.monotonic() - stopped_at < 30
        assert answer["status"] == 503, answer
        assert answer["body"]["error"]["code"] == "service_stopping", answer
        with closing(sqlite3.connect(var_dir / "pathfinder.sqlite3", timeout=30)) as db:
            status, attempts = db.execute(
                "SELECT status, attempts FROM decoding_generationjob WHERE id = ?",
                [answer["job"].replace("-", "")],
            ).fetchone()
        assert (status, attempts) == ("cancelled", 1), (status, attempts, serve.tail())
        assert "Perhaps out of memory" not in serve.log(), serve.tail()
    except requests.ConnectionError:
        # Once on CI (2026-12-07) /metrics was refused after /readyz had answered: say whether
        # serve was still running and what it logged last, so the next failure names its cause.
        state = "running" if serve.alive() else f"exited {serve.popen.returncode}"
        print(f"serve was {state} when a request was refused; its log ends:\n{serve.tail(200)}")
        raise
    finally:
        serve.stop()

    # Queue state belongs under PATHFINDER_VAR_DIR, not wherever the command was started.
    assert sorted(p.name for p in workdir.iterdir()) == [], "serve wrote to its working directory"

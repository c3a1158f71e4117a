"""Browser-test fixtures: headless Chromium against the reviewer portal on real processes.

The stack is built like tests/system's (its helpers are reused): a database of its own, gunicorn
with two workers, one Celery worker on a queue of its own, logs in files. On top of it the fixture
creates two matters with an API key each, a few finished jobs and one reviewer per matter. The
browser is Debian's /usr/bin/chromium driven by Playwright's sync API (never `playwright install`);
every test gets a fresh context, so no session leaks from one test into the next.
"""

from __future__ import annotations

import os
import secrets
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from tests.system.helpers import (
    Stack,
    auth,
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
    wait_until_healthy,
)

from .helpers import Portal, Reviewer

CHROMIUM = os.environ.get("PATHFINDER_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-dev-shm-usage",
]
VIEWPORT = {"width": 1280, "height": 800}
# Generous for one action on a loaded CI machine, short enough that a broken page fails fast.
ACTION_TIMEOUT_MS = 10_000
# Screenshots go to a temporary folder unless asked for: refresh the committed ones in the
# README with `PATHFINDER_SCREENSHOT_DIR=docs/screenshots make test PYTEST_ARGS=tests/browser`.
SCREENSHOT_DIR = os.environ.get("PATHFINDER_SCREENSHOT_DIR")

MATTER = "Doe v. Roe"
OTHER_MATTER = "Other v. Matter"
JOB_TIMEOUT_S = 60
ANSWERED_SEED = 5
# The default model drafting the request's full draft_length every step (the adaptive schedule
# drafts little on a worker that has measured nothing yet), so the walk shows drafted tokens.
FIXED_MODEL = "smollm2-fixed"
# Answered by copying from the prompt, so its tokens are drafted, corrected and bonus ones.
ANSWERED_QUESTION = (
    "Quote the first sentence of this text: The hearing was adjourned at noon. "
    "Counsel returned at two."
)


def _submit(stack: Stack, key: str, seed: int) -> dict:
    body = {
        "prompt_token_ids": [1, 2, 3],
        "max_tokens": 30,
        "temperature": 0.8,
        "seed": seed,
        "request_id": f"req-{seed}",
    }
    if seed == ANSWERED_SEED:  # a question in words, answered by the real default model
        body = {
            "model": FIXED_MODEL,
            "messages": [{"role": "user", "content": ANSWERED_QUESTION}],
            "max_tokens": 24,
            "temperature": 0,
            "request_id": f"req-{seed}",
        }
    response = requests.post(
        stack.url("/api/v1/generations"), json=body, headers=auth(key), timeout=30
    )
    assert response.status_code == 202, response.text
    return response.json()


def _wait_for_all(stack: Stack, pending: dict[str, tuple[str, str]]) -> dict[str, dict]:
    """Poll every job (name -> (id, key)) until each has finished; returns name -> job."""
    done: dict[str, dict] = {}
    deadline = time.monotonic() + JOB_TIMEOUT_S
    while len(done) < len(pending):
        for name, (job_id, key) in pending.items():
            if name in done:
                continue
            response = requests.get(
                stack.url(f"/api/v1/generations/{job_id}"), headers=auth(key), timeout=30
            )
            assert response.status_code == 200, response.text
            job = response.json()
            if job["status"] in ("succeeded", "failed"):
                assert job["status"] == "succeeded", job
                done[name] = job
        if len(done) < len(pending):
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"jobs {sorted(set(pending) - set(done))} unfinished after {JOB_TIMEOUT_S}s\n"
                    f"{stack.log_tails()}"
                )
            time.sleep(0.2)
    return done


@pytest.fixture(scope="session")
def portal(tmp_path_factory) -> Iterator[Portal]:
    suffix = secrets.token_hex(4)
    database = f"pathfinder_browser_{suffix}"
    admin_url = create_database(database)
    database_url = postgres_url(database)
    var_dir = tmp_path_factory.mktemp("browser-var")
    log_dir = tmp_path_factory.mktemp("browser-logs")
    env = {
        **os.environ,
        "DATABASE_URL": database_url,
        "CELERY_BROKER_URL": broker_url(),
        "PATHFINDER_TASK_QUEUE": f"pathfinder-browser-{suffix}",
        "PATHFINDER_LOG_LEVEL": "WARNING",
        "PATHFINDER_DEFAULT_MODEL": "stub",
        "PATHFINDER_VAR_DIR": str(var_dir),
        "PATHFINDER_CHECKPOINT_KEY_FILE": str(var_dir / "signing.key"),
    }
    port = free_port()
    worker_name = f"browser-{suffix}@{socket.gethostname()}"
    stack = Stack(
        base_url=f"http://127.0.0.1:{port}",
        api_key="",
        env=env,
        database=database,
        database_url=database_url,
        worker_names=[worker_name],
    )
    portal = Portal(
        stack=stack,
        alice=Reviewer("alice", secrets.token_urlsafe(12), MATTER),
        bob=Reviewer("bob", secrets.token_urlsafe(12), OTHER_MATTER),
        log_dir=log_dir,
    )
    try:
        for args in (
            ("migrate", "--noinput"),
            ("collectstatic", "--noinput", "--verbosity", "0"),
            ("bootstrap_local",),  # the signing key: this stack signs its own checkpoints
        ):
            completed = stack.manage(*args)
            assert completed.returncode == 0, describe(completed)
        stack.copy_spec("smollm2-135m-instruct", FIXED_MODEL, draft_schedule="fixed")
        stack.api_key = last_line(stack.manage("create_api_key", "--matter", MATTER, "app"))
        stack.other_api_key = last_line(
            stack.manage("create_api_key", "--matter", OTHER_MATTER, "app")
        )
        for reviewer in (portal.alice, portal.bob):
            created = stack.manage(
                "create_reviewer",
                reviewer.username,
                f"--password={reviewer.password}",  # a password may start with "-"
                "--matter",
                reviewer.matter,
            )
            assert created.returncode == 0, describe(created)
        stack.processes["gunicorn"] = start_process(
            "gunicorn",
            [
                sys.executable, "-m", "gunicorn", "pathfinder_site.wsgi:application",
                "--bind", f"127.0.0.1:{port}", "--workers", "2", "--access-logfile", "-",
            ],
            env,
            log_dir,
        )  # fmt: skip
        stack.processes["worker"] = start_process(
            "worker",
            [
                sys.executable, "-m", "celery", "-A", "pathfinder_site", "worker",
                "--concurrency", "1", "--pool", "prefork", "-n", worker_name,
                "--loglevel", "INFO",
            ],
            env,
            log_dir,
        )  # fmt: skip
        wait_until_healthy(stack.base_url, portal.processes)
        # The API queues jobs whether or not the worker is up yet; no need to ping it first.
        pending = {
            name: (_submit(stack, key, seed)["id"], key)
            for name, key, seed in (
                ("walked", stack.api_key, 1),  # searched, walked, verified, replayed, exported
                ("tampered", stack.api_key, 2),  # its record seq 2 is rewritten by one test
                ("signed", stack.api_key, 3),  # annotated and signed off
                ("other", stack.other_api_key, 4),  # bob's matter
                ("answered", stack.api_key, ANSWERED_SEED),  # searched by its words
            )
        }
        portal.jobs = _wait_for_all(stack, pending)
        # What beat does within a minute of the seals: a checkpoint that covers every trail.
        signed = stack.manage("checkpoint")
        assert signed.returncode == 0, describe(signed)
        yield portal
    finally:
        stop_all(portal.processes)
        drop_database(admin_url, database)
        forget_queue(env["CELERY_BROKER_URL"], env["PATHFINDER_TASK_QUEUE"])


# --- the browser ----------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def browser():
    from playwright.sync_api import expect, sync_playwright

    if not Path(CHROMIUM).exists():
        pytest.fail(f"browser tests need Chromium at {CHROMIUM} (apt-get install chromium)")
    expect.set_options(timeout=ACTION_TIMEOUT_MS)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


BROWSER_ERRORS = pytest.StashKey[list]()


@pytest.fixture
def page(browser, portal, request):
    """A page in a fresh context (no cookies), 1280 px wide. Its console errors are reported on a
    failure; an uncaught JavaScript exception fails the test at teardown."""
    context = browser.new_context(
        base_url=portal.base_url, viewport=VIEWPORT, accept_downloads=True
    )
    context.set_default_timeout(ACTION_TIMEOUT_MS)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(f"pageerror: {error}"))
    page.on(
        "console",
        lambda message: (
            errors.append(f"console.{message.type}: {message.text}")
            if message.type == "error"
            else None
        ),
    )
    request.node.stash[BROWSER_ERRORS] = errors
    yield page
    context.close()
    uncaught = [error for error in errors if error.startswith("pageerror")]
    assert not uncaught, f"uncaught JavaScript errors: {uncaught}"


@pytest.fixture(scope="session")
def screenshot_dir(tmp_path_factory) -> Path:
    if SCREENSHOT_DIR is None:
        return tmp_path_factory.mktemp("screenshots")
    directory = Path(SCREENSHOT_DIR)
    directory.mkdir(parents=True, exist_ok=True)
    return directory


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """On a failure: the page's URL, a screenshot, its JavaScript errors and the process logs."""
    report = yield
    if not report.failed:
        return report
    funcargs = getattr(item, "funcargs", {})
    page = funcargs.get("page")
    portal = funcargs.get("portal")
    if page is not None and isinstance(portal, Portal) and not page.is_closed():
        shot = portal.log_dir / f"{item.name}-failure.png"
        try:
            page.screenshot(path=str(shot), full_page=True)
            report.sections.append(("browser", f"url {page.url}\nscreenshot {shot}"))
        except Exception as exc:  # the page may be mid-navigation or crashed
            report.sections.append(("browser", f"url {page.url}\nno screenshot: {exc!r}"))
    errors = item.stash.get(BROWSER_ERRORS, [])
    if errors:
        report.sections.append(("browser errors", "\n".join(errors)))
    if isinstance(portal, Portal):
        for process in portal.processes:
            report.sections.append((f"{process.name} log ({process.log_path})", process.tail()))
    return report

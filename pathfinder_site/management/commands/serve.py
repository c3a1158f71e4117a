"""Serve the API (the buffering front, gunicorn behind it) and run one Celery worker (with beat
inside it) from a single command.

Production runs gunicorn, `celery worker` and one `celery beat` as separate services; this is the
one-command way to bring everything up on one machine (the embedded default).
"""

import contextlib
import ctypes
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError


class Command(BaseCommand):
    help = "Serve the web app with gunicorn and start one Celery worker beside it."

    def add_arguments(self, parser):
        parser.add_argument("--bind", default="127.0.0.1:8000")
        parser.add_argument("--web-workers", type=int, default=2)

    def handle(self, *args, **options):
        _require_free(options["bind"])
        python = sys.executable
        env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(_fresh_metrics_dir())}
        beat_schedule = settings.VAR_DIR / "celerybeat-schedule"
        # Each in a session of its own: a terminal's Ctrl-C (SIGINT to its foreground process
        # group) reaches this command alone, which stops the others as SIGTERM does, in order,
        # instead of interrupting gunicorn's workers and the decoding process mid-request.
        worker = subprocess.Popen(
            # The worker decodes PATHFINDER_WORKER_SEQUENCES jobs at once, as in production.
            [python, "-m", "celery", "-A", "pathfinder_site", "worker", "--beat", "--schedule",
             str(beat_schedule)],
            env=env,
            start_new_session=True,
            preexec_fn=_stop_with_parent,
        )  # fmt: skip
        # gunicorn on a private loopback port behind the buffering front (pathfinder_site.front),
        # which alone listens on --bind: a slow client holds a coroutine there, not a thread.
        upstream = f"127.0.0.1:{_free_port()}"
        trusted = ",".join(filter(None, [env.get("PATHFINDER_TRUSTED_PROXIES", ""), "127.0.0.1"]))
        web = subprocess.Popen(
            [python, "-m", "gunicorn", "pathfinder_site.wsgi:application", "--bind", upstream,
             "--workers", str(options["web_workers"]), "--access-logfile", "-",
             "--config", str(settings.BASE_DIR / "gunicorn.conf.py")],
            env={**env, "PATHFINDER_TRUSTED_PROXIES": trusted},
            start_new_session=True,
            preexec_fn=_stop_with_parent,
        )  # fmt: skip
        front = subprocess.Popen(
            [python, "-m", "pathfinder_site.front", "--bind", options["bind"], "--upstream",
             upstream],
            env=env,
            start_new_session=True,
            preexec_fn=_stop_with_parent,
        )  # fmt: skip
        started = time.monotonic()
        self.stdout.write(
            f"Serving on http://{options['bind']}/ with one Celery worker (and beat). Loading "
            "the model… (Ctrl-C stops everything.)"
        )

        def stop(signum, frame):
            # A second signal must not cut the cleanup short.
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            raise KeyboardInterrupt

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        ready = False
        try:
            while all(process.poll() is None for process in (front, web, worker)):
                with contextlib.suppress(subprocess.TimeoutExpired):
                    web.wait(timeout=1)
                if not ready and (ready := _ready()):
                    self.stdout.write(
                        f"Ready in {time.monotonic() - started:.0f} s: "
                        f"http://{options['bind']}/ (the desk at /portal/)."
                    )
        except KeyboardInterrupt:
            pass
        finally:
            _stop_all(front, web, worker)
        if any(process.returncode > 0 for process in (front, web, worker)):
            sys.exit(1)


def _require_free(bind: str) -> None:
    """Refuse, in one line, an address something else already listens on (before anything
    starts: the front would fail behind a "Serving on" line and a traceback)."""
    host, _, port = bind.rpartition(":")
    try:
        with socket.socket() as probe:
            probe.bind((host.strip("[]") or "0.0.0.0", int(port)))
    except ValueError as exc:
        raise CommandError(f"--bind {bind!r} is not host:port") from exc
    except OSError as exc:
        raise CommandError(
            f"{bind} is in use ({exc.strerror}): serve elsewhere with make run "
            "BIND=127.0.0.1:8123 (manage.py serve --bind)"
        ) from exc


def _ready() -> bool:
    """Whether the service answers ready (/readyz's check, asked here, not over HTTP)."""
    from pathfinder_site.health import readiness

    try:
        return readiness()["ready"]
    except Exception:  # not ready yet: asked again in a second
        return False


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _stop_with_parent() -> None:
    """In the child, before it runs: SIGTERM when this command dies, however it dies (Linux;
    elsewhere a killed command leaves them to be stopped by hand)."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


PR_SET_PDEATHSIG = 1


def _fresh_metrics_dir():
    # prometheus_client's multiprocess files from an earlier run would be counted again.
    directory = settings.VAR_DIR / "prometheus"
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    return directory


def _stop_all(*processes: subprocess.Popen) -> None:
    # SIGTERM lets the worker finish its current step's commit (a warm shutdown).
    for process in processes:
        if process.poll() is None:
            process.terminate()
    for process in processes:
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

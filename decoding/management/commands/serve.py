"""Serve the API and run one Celery worker (with beat inside it) from a single command.

Production runs gunicorn, `celery worker` and one `celery beat` as separate services; this is the
one-command way to bring everything up on one machine (the embedded default).
"""

import contextlib
import os
import shutil
import signal
import subprocess
import sys

from django.conf import settings
from django.core.management.base import BaseCommand


class Command(BaseCommand):
    help = "Serve the web app with gunicorn and start one Celery worker beside it."

    def add_arguments(self, parser):
        parser.add_argument("--bind", default="127.0.0.1:8000")
        parser.add_argument("--web-workers", type=int, default=2)

    def handle(self, *args, **options):
        python = sys.executable
        env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(_fresh_metrics_dir())}
        beat_schedule = settings.VAR_DIR / "celerybeat-schedule"
        worker = subprocess.Popen(
            # The worker decodes PATHFINDER_WORKER_SEQUENCES jobs at once, as in production.
            [python, "-m", "celery", "-A", "pathfinder_site", "worker", "--beat", "--schedule",
             str(beat_schedule)],
            env=env,
        )  # fmt: skip
        web = subprocess.Popen(
            [python, "-m", "gunicorn", "pathfinder_site.wsgi:application", "--bind",
             options["bind"], "--workers", str(options["web_workers"]), "--access-logfile", "-",
             "--config", str(settings.BASE_DIR / "gunicorn.conf.py")],
            env=env,
        )  # fmt: skip
        self.stdout.write(
            f"Serving on http://{options['bind']}/ with one Celery worker (and beat)."
        )

        def stop(signum, frame):
            signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second SIGTERM must not cut cleanup
            raise KeyboardInterrupt

        signal.signal(signal.SIGTERM, stop)
        try:
            while web.poll() is None and worker.poll() is None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    web.wait(timeout=1)
        except KeyboardInterrupt:
            pass
        finally:
            _stop_all(web, worker)
        if web.returncode > 0 or worker.returncode > 0:
            sys.exit(1)


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

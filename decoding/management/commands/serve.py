"""Serve the API and run one Celery worker from a single command (the embedded default).

Production runs gunicorn and `celery worker` as separate services; this is the one-command way to
bring everything up on one machine.
"""

import contextlib
import signal
import subprocess
import sys

from django.core.management.base import BaseCommand


class Command(BaseCommand):
    help = "Serve the web app with gunicorn and start one Celery worker beside it."

    def add_arguments(self, parser):
        parser.add_argument("--bind", default="127.0.0.1:8000")
        parser.add_argument("--web-workers", type=int, default=2)

    def handle(self, *args, **options):
        python = sys.executable
        worker = subprocess.Popen(
            [python, "-m", "celery", "-A", "pathfinder_site", "worker", "--concurrency", "1"]
        )
        web = subprocess.Popen(
            [python, "-m", "gunicorn", "pathfinder_site.wsgi:application", "--bind",
             options["bind"], "--workers", str(options["web_workers"]), "--access-logfile", "-"]
        )  # fmt: skip
        self.stdout.write(f"Serving on http://{options['bind']}/ with one Celery worker.")

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

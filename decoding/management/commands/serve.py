"""Serve the API and run one Celery worker from a single command (the embedded default).

Production runs gunicorn and `celery worker` as separate services (docs/operations.md); this is the
one-command way to bring everything up on one machine.
"""

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
        worker = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "pathfinder_site", "worker",
             "--loglevel", "INFO", "--concurrency", "1", "--pool", "prefork"]
        )
        web = subprocess.Popen(
            [sys.executable, "-m", "gunicorn", "pathfinder_site.wsgi:application",
             "--bind", options["bind"], "--workers", str(options["web_workers"]),
             "--access-logfile", "-"]
        )
        self.stdout.write(f"Serving on http://{options['bind']}/ with one Celery worker.")

        def stop(signum, frame):
            raise KeyboardInterrupt

        signal.signal(signal.SIGTERM, stop)
        try:
            while web.poll() is None and worker.poll() is None:
                try:
                    web.wait(timeout=1)
                except subprocess.TimeoutExpired:
                    pass
        except KeyboardInterrupt:
            pass
        finally:
            for process in (web, worker):
                if process.poll() is None:
                    process.terminate()
            for process in (web, worker):
                try:
                    process.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    process.kill()
        if web.returncode not in (0, -signal.SIGTERM, None) or worker.returncode not in (
            0, -signal.SIGTERM, None
        ):
            sys.exit(1)

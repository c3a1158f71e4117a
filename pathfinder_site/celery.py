"""The Celery application; configuration comes from Django settings (CELERY_* names)."""

import os

from celery import Celery
from celery.concurrency import get_implementation
from celery.concurrency.thread import TaskPool as ThreadPool
from celery.signals import worker_init

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "pathfinder_site.settings")

app = Celery("pathfinder")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@worker_init.connect
def size_the_batch(sender, **_) -> None:
    """A threads pool decodes as many jobs at once as it has threads (PATHFINDER_WORKER_SEQUENCES
    or `-c N`), in one batch engine (decoding.runtime); a prefork pool's processes one each."""
    from decoding.runtime import set_worker_sequences

    threads = get_implementation(sender.pool_cls) is ThreadPool
    concurrency = sender.concurrency
    set_worker_sequences(int(concurrency) if threads and str(concurrency).isdigit() else 1)

"""The Celery application; configuration comes from Django settings (CELERY_* names)."""

import logging
import multiprocessing
import os
import time

from celery import Celery
from celery.concurrency import get_implementation
from celery.concurrency.thread import TaskPool as ThreadPool
from celery.signals import (
    task_received,
    worker_init,
    worker_process_init,
    worker_ready,
    worker_shutdown,
)
from celery.worker.control import control_command, inspect_command
from django.db import connections

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "pathfinder_site.settings")

logger = logging.getLogger(__name__)
app = Celery("pathfinder")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


# Pids of this worker's processes that have loaded their models: shared memory made before the
# pool forks, so the main process, which answers readiness, sees its children's loads.
_loaded_pids = None


@worker_init.connect
def size_the_engine(sender, **_) -> None:
    """A threads pool decodes as many jobs at once as it has threads (PATHFINDER_WORKER_SEQUENCES
    or `-c N`), in one sequence engine (decoding.worker.runtime); a prefork pool's processes one
    each.
    The threads share this process's models, loaded now; a prefork child loads its own."""
    from decoding.worker.runtime import set_worker_sequences

    global _loaded_pids
    _loaded_pids = multiprocessing.Array("i", 256)
    threads = get_implementation(sender.pool_cls) is ThreadPool
    concurrency = sender.concurrency
    set_worker_sequences(int(concurrency) if threads and str(concurrency).isdigit() else 1)
    if threads:
        _load_models()


@worker_process_init.connect
def load_in_the_decoding_process(**_) -> None:
    _load_models()


def _load_models() -> None:
    """The default model, loaded before the first job asks for it (decoding.worker.runtime);
    where it cannot be, the error is logged, readiness says not loaded, and each job fails with
    it."""
    from decoding.worker.runtime import preload_default

    started = time.perf_counter()
    try:
        name = preload_default()
    except Exception as exc:
        logger.error("could not load the default model", extra={"error": str(exc)[:500]})
        return
    finally:
        connections.close_all()  # none a later fork (the pool's, beat's) would share
    seconds = round(time.perf_counter() - started, 2)
    logger.info("models loaded", extra={"model": name, "seconds": seconds})
    with _loaded_pids.get_lock():
        free = next(i for i, pid in enumerate(_loaded_pids) if not _alive(pid))
        _loaded_pids[free] = os.getpid()


def _alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


@inspect_command()
def pathfinder_models(state) -> dict:
    """How many of this worker's processes have loaded their models (`/readyz`)."""
    # A prefork pool names its children; a threads pool decodes in this process.
    pids = state.consumer.pool.info.get("processes") or [os.getpid()]
    loaded = {pid for pid in (_loaded_pids or []) if _alive(pid)}
    return {"processes": len(pids), "loaded": sum(pid in loaded for pid in pids)}


@control_command(args=[("matter_id", int), ("queue", str)], signature="<matter_id> <queue>")
def forget_matter(state, matter_id: int, queue: str) -> dict:
    """Drop what a destroyed matter's jobs left in this worker (decoding.worker.forgetting):
    the decoding process's own state on a threads-pool or solo worker; a prefork pool's
    children forget before their next job of the matter. Only a worker of the deployment that
    sent it (consuming its `queue`) acts: another sharing the broker has matters of its own."""
    from decoding.worker.forgetting import forget_matter as forget

    consumer = getattr(state.consumer, "task_consumer", None)
    if consumer is not None and queue not in {q.name for q in consumer.queues}:
        return {"ok": "another deployment's worker"}
    return {"ok": "forgotten", "references": forget(matter_id), "pid": os.getpid()}


_holder = None


@task_received.connect
def mark_received(sender, request, **_) -> None:
    """The job's message is this worker's now (decoding.delivery): marked before it waits for
    a slot, so the recovery sweep does not send it again."""
    from decoding import affinity, delivery

    if request.name == delivery.RUN_GENERATION:
        try:
            delivery.hold([request.id], sender.hostname)
            affinity.received(sender.hostname)
        except Exception as exc:  # the holder's next renewal marks it, or the sweep resends it
            logger.warning("could not mark a received job", extra={"error": str(exc)})


@worker_ready.connect
def start_holding(sender, **_) -> None:
    """Consume this worker's own queue beside the shared one (decoding.affinity), say it is live,
    and renew its marks and its presence from now on."""
    from decoding import affinity
    from decoding.delivery import Holder

    global _holder
    if affinity.enabled():
        sender.add_task_queue(affinity.worker_queue(sender.hostname))
        affinity.announce(sender.hostname)
    _holder = Holder(sender.hostname)
    _holder.start()


@worker_shutdown.connect
def stop_holding(**_) -> None:
    from decoding import affinity

    if _holder is not None:
        _holder.stop()
        try:
            affinity.withdraw(_holder.worker)
        except Exception as exc:  # its presence lapses; the sweep sends its queue again
            logger.warning("could not withdraw the worker", extra={"error": str(exc)})

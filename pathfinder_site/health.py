"""Readiness: can this deployment take and finish a job, and is its audit upkeep current?"""

from __future__ import annotations

from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

from audit.log import witness_status
from audit.models import Checkpoint, VerificationRun

# Seconds to wait for workers to answer.
WORKER_PING_S = 1.0


def readiness() -> dict:
    """{"ready": bool, "checks": {...}, "alerts": [...]}: ready when the database answers with
    every migration applied, the broker answers and at least one worker does with its models
    loaded. The ages of the last successful verification and checkpoint are reported (a fresh
    installation has neither), and `alerts` names audit upkeep that needs a person (a
    checkpoint below the witness quorum, a broken verification) without taking the service out
    of rotation."""
    checks = {"database": _database()}
    checks["migrations"] = _migrations() if checks["database"]["ok"] else {"ok": False}
    checks["broker"] = _broker()
    checks["workers"] = _workers() if checks["broker"]["ok"] else {"ok": False, "count": 0}
    if checks["database"]["ok"]:
        checks["verification"] = _verification()
        checks["checkpoint"] = _checkpoint()
    ready = all(checks[name]["ok"] for name in ("database", "migrations", "broker", "workers"))
    alerts = [
        f"{name}: {checks[name]['alert']}"
        for name in ("verification", "checkpoint")
        if name in checks and not checks[name]["ok"]
    ]
    return {"ready": ready, "checks": checks, "alerts": alerts}


def _error(exc: Exception) -> dict:
    return {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:300]}


def _database() -> dict:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        return {"ok": True, "vendor": connection.vendor}
    except Exception as exc:
        return _error(exc)


def _migrations() -> dict:
    try:
        executor = MigrationExecutor(connection)
        pending = executor.migration_plan(executor.loader.graph.leaf_nodes())
        return {"ok": not pending, "pending": len(pending)}
    except Exception as exc:
        return _error(exc)


def _broker() -> dict:
    from pathfinder_site.celery import app

    try:
        with app.connection_for_write() as conn:
            conn.ensure_connection(max_retries=1, timeout=2)
            return {"ok": True, "transport": conn.transport_cls}
    except Exception as exc:
        return _error(exc)


def _workers() -> dict:
    """Workers that answer and consume this deployment's queue: a worker of another deployment
    sharing the broker does not make this one ready."""
    from django.conf import settings

    from pathfinder_site.celery import app

    try:
        replies = app.control.inspect(timeout=WORKER_PING_S).active_queues() or {}
    except Exception as exc:
        return {**_error(exc), "count": 0}
    queue = settings.CELERY_TASK_DEFAULT_QUEUE
    names = sorted(
        name for name, queues in replies.items() if any(q["name"] == queue for q in queues)
    )
    report = {"ok": bool(names), "count": len(names), "names": names, "queue": queue}
    if not names:
        return report
    models = _models(app, names)
    # Ready once a worker can decode at once: its processes have loaded their models.
    loaded = [name for name, state in models.items() if (state or {}).get("loaded")]
    return {**report, "ok": bool(loaded), "slots": _slots(app, names), "models": models}


def _models(app, names: list[str]) -> dict:
    """Per worker, how many of its decoding processes have loaded their models (they do at
    start-up, pathfinder_site.celery); None where a worker did not answer in time."""
    try:
        replies = app.control.broadcast(
            "pathfinder_models", reply=True, timeout=WORKER_PING_S, destination=names
        )
    except Exception:
        return dict.fromkeys(names)
    answers = {name: answer for reply in replies or [] for name, answer in reply.items()}
    return {name: answers[name] if "loaded" in answers.get(name, {}) else None for name in names}


def _slots(app, names: list[str]) -> dict:
    """Per worker, the jobs it decodes at once (its pool's size: PATHFINDER_WORKER_SEQUENCES or
    -c N) and how many it is decoding now; None where a worker did not answer in time."""
    inspect = app.control.inspect(timeout=WORKER_PING_S, destination=names, limit=len(names))
    try:
        stats, active = inspect.stats() or {}, inspect.active() or {}
    except Exception:
        return dict.fromkeys(names)
    return {
        name: {
            "slots": stats[name].get("pool", {}).get("max-concurrency"),
            "busy": len(active.get(name, [])),
        }
        if name in stats
        else None
        for name in names
    }


def _age_s(moment) -> float | None:
    return None if moment is None else round((timezone.now() - moment).total_seconds(), 1)


def _verification() -> dict:
    last_ok = VerificationRun.objects.filter(ok=True).order_by("-id").first()
    last = VerificationRun.objects.order_by("-id").first()
    ok = last is None or last.ok
    return {
        "ok": ok,
        "last_run_ok": None if last is None else last.ok,
        "last_success_age_s": _age_s(last_ok.finished_at if last_ok else None),
        **({} if ok else {"alert": "the last verification run found broken links"}),
    }


def _checkpoint() -> dict:
    last = Checkpoint.objects.order_by("-id").first()
    if last is None:
        return {"ok": True, "tree_size": None, "age_s": None}
    witnesses = witness_status(last)
    return {
        "ok": witnesses.ok,
        "tree_size": last.tree_size,
        "age_s": _age_s(last.created_at),
        "cosignatures": witnesses.cosigned,
        "witness_quorum": witnesses.quorum,
        "timestamped": last.timestamp_token is not None,
        **(
            {}
            if witnesses.ok
            else {"alert": f"{witnesses.cosigned} of the {witnesses.quorum} cosignatures needed"}
        ),
    }

"""Operational endpoints: liveness, readiness and Prometheus metrics.

With PATHFINDER_METRICS_TOKEN set, /metrics and the detailed /readyz want it as a bearer token;
without it /readyz says only whether the deployment is ready, naming no host and no error.
"""

import hmac
import os

from django.conf import settings
from django.http import HttpResponse, JsonResponse
from prometheus_client import REGISTRY, CollectorRegistry, generate_latest, multiprocess
from prometheus_client.exposition import CONTENT_TYPE_LATEST

import pathfinder_site

from .health import readiness
from .metrics_db import DatabaseCollector
from .recent import Recent

READINESS = Recent(readiness)


def healthz(request):
    """Liveness: the process serves requests (nothing else is checked)."""
    return JsonResponse({"status": "ok", "version": pathfinder_site.__version__})


def readyz(request):
    report = READINESS.get()
    status = 200 if report["ready"] else 503
    body = report if _token_given(request) else {"ready": report["ready"]}
    response = JsonResponse(body, status=status)
    # A 503 here is an answer (not ready yet: the model is loading), not a server error:
    # Django's request logger would log every probe of a starting service at ERROR.
    response._has_been_logged = True
    return response


def metrics(request):
    """Every process's samples on this machine (multiprocess mode), plus database gauges."""
    if settings.PATHFINDER_METRICS_TOKEN and not _token_given(request):
        response = JsonResponse(
            {"error": "authorization: the metrics token is required"}, status=401
        )
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response
    if "PROMETHEUS_MULTIPROC_DIR" in os.environ:
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
    else:
        registry = CollectorRegistry()
        registry.register(_Default())
    registry.register(DatabaseCollector())
    return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)


def _token_given(request) -> bool:
    token = settings.PATHFINDER_METRICS_TOKEN
    given = request.headers.get("Authorization", "")
    return bool(token) and hmac.compare_digest(given.encode(), f"Bearer {token}".encode())


class _Default:
    """The process's own default registry, as one collector."""

    def collect(self):
        yield from REGISTRY.collect()

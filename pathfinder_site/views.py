"""Operational endpoints: liveness, readiness and Prometheus metrics."""

import os

from django.http import HttpResponse, JsonResponse
from prometheus_client import REGISTRY, CollectorRegistry, generate_latest, multiprocess
from prometheus_client.exposition import CONTENT_TYPE_LATEST

import pathfinder_site

from .health import readiness
from .metrics_db import DatabaseCollector


def healthz(request):
    """Liveness: the process serves requests (nothing else is checked)."""
    return JsonResponse({"status": "ok", "version": pathfinder_site.__version__})


def readyz(request):
    report = readiness()
    return JsonResponse(report, status=200 if report["ready"] else 503)


def metrics(request):
    """Every process's samples on this machine (multiprocess mode), plus database gauges."""
    if "PROMETHEUS_MULTIPROC_DIR" in os.environ:
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
    else:
        registry = CollectorRegistry()
        registry.register(_Default())
    registry.register(DatabaseCollector())
    return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)


class _Default:
    """The process's own default registry, as one collector."""

    def collect(self):
        yield from REGISTRY.collect()

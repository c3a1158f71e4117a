"""Gauges read from the database at scrape time: true for the whole deployment, whichever
process is scraped."""

from django.db.models import Count
from django.utils import timezone
from prometheus_client.core import GaugeMetricFamily

from audit.log import witness_status
from audit.models import Checkpoint, VerificationRun
from decoding.models import GenerationJob

from .recent import Recent


class DatabaseCollector:
    """The gauges, read at most every PATHFINDER_OPS_CACHE_S per process (a scrape storm costs
    the database one read per interval, not a GROUP BY per request)."""

    def collect(self):
        yield from _GAUGES.get()


def _read_gauges():
    jobs = GaugeMetricFamily("pathfinder_jobs", "Jobs by current status", labels=["status"])
    counts = dict(GenerationJob.objects.values_list("status").annotate(n=Count("pk")).order_by())
    for status in GenerationJob.Status.values:
        jobs.add_metric([status], counts.get(status, 0))
    yield jobs

    now = timezone.now()
    checkpoint = Checkpoint.objects.order_by("-id").first()
    if checkpoint is not None:
        yield GaugeMetricFamily(
            "pathfinder_checkpoint_age_seconds",
            "Seconds since the last signed checkpoint",
            value=(now - checkpoint.created_at).total_seconds(),
        )
        witnesses = witness_status(checkpoint)
        yield GaugeMetricFamily(
            "pathfinder_checkpoint_cosignatures",
            "Cosignatures of the configured witnesses on the last checkpoint",
            value=witnesses.cosigned,
        )
        yield GaugeMetricFamily(
            "pathfinder_checkpoint_witness_quorum_met",
            "1 if the last checkpoint has the quorum of witness cosignatures (alert on 0)",
            value=1 if witnesses.ok else 0,
        )
    last = VerificationRun.objects.order_by("-id").only("ok", "finished_at").first()
    if last is not None:
        yield GaugeMetricFamily(
            "pathfinder_last_verification_ok",
            "1 if the last verification run found every link intact",
            value=1 if last.ok else 0,
        )
        yield GaugeMetricFamily(
            "pathfinder_last_verification_age_seconds",
            "Seconds since the last verification run finished",
            value=(now - last.finished_at).total_seconds(),
        )


_GAUGES = Recent(lambda: list(_read_gauges()))

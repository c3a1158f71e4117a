"""Audit metrics observed in-process (see decoding.metrics for the multiprocess setup)."""

from prometheus_client import Counter

VERIFICATION_FAILURES = Counter(
    "pathfinder_verification_failures_total", "Broken links found by periodic verification runs"
)

"""Domain metrics for Prometheus, observed where the work happens (workers and web processes).

With PROMETHEUS_MULTIPROC_DIR set (the Makefile and the deployment guide set it), every process
on a machine writes its samples there and /metrics on that machine reports them together; the
gauges read from the database at scrape time live in decoding.web.api.metrics_view.
"""

from __future__ import annotations

from prometheus_client import Counter, Histogram

from decoding.engine import GenerationResult

JOBS_FINISHED = Counter(
    "pathfinder_jobs_finished_total", "Jobs that ended, by final status", ["status"]
)
DECODE_STEPS = Counter("pathfinder_decode_steps_total", "Speculative steps decoded (recorded)")
DRAFTED = Counter("pathfinder_drafted_tokens_total", "Draft tokens proposed")
ACCEPTED = Counter("pathfinder_accepted_tokens_total", "Draft tokens accepted")
POSITION_DRAFTED = Counter(
    "pathfinder_position_drafted_total",
    "Draft tokens proposed at each draft position",
    ["position"],
)
POSITION_ACCEPTED = Counter(
    "pathfinder_position_accepted_total",
    "Draft tokens accepted at each draft position (rate = accepted / drafted)",
    ["position"],
)
AUDIT_COMMIT_SECONDS = Histogram(
    "pathfinder_audit_commit_seconds",
    "Time to commit one group of decision records (one transaction)",
    buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 1.0),
)
STEP_PART_SECONDS = Counter(
    "pathfinder_step_part_seconds_total",
    "Time decode steps spent in each part (engine.decoder.STEP_PARTS): divided by "
    "pathfinder_decode_steps_total, where a step's time goes",
    ["part"],
)

OUTPUT_TOKENS = Counter(
    "pathfinder_output_tokens_total", "Tokens decoded for callers (its rate: tokens/s per worker)"
)
QUEUE_WAIT_SECONDS = Histogram(
    "pathfinder_job_queue_seconds",
    "From a job's submission to the start of its attempt on a worker",
    buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300),
)
PASS_SEQUENCES = Histogram(
    "pathfinder_pass_sequences",
    "Jobs with positions in each pass of a worker's sequence engine (its occupancy)",
    buckets=(1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 64),
)
PASS_POSITIONS = Histogram(
    "pathfinder_pass_positions",
    "Positions each pass of a sequence engine evaluated, the filler that evens them out included",
    buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512),
)
PASS_SECONDS = Histogram(
    "pathfinder_pass_seconds",
    "Time of one pass of a sequence engine",
    buckets=(0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0),
)


def engine_pass(sequences: int, positions: int, seconds: float) -> None:
    PASS_SEQUENCES.observe(sequences)
    PASS_POSITIONS.observe(positions)
    PASS_SECONDS.observe(seconds)


def job_started(queued_s: float) -> None:
    QUEUE_WAIT_SECONDS.observe(queued_s)


def job_finished(status: str) -> None:
    JOBS_FINISHED.labels(status=str(status)).inc()


def job_decoded(result: GenerationResult) -> None:
    DECODE_STEPS.inc(result.steps)
    OUTPUT_TOKENS.inc(len(result.output_token_ids))
    DRAFTED.inc(result.drafted)
    ACCEPTED.inc(result.accepted)
    for part, ns in result.parts_ns:
        STEP_PART_SECONDS.labels(part=part).inc(ns / 1e9)
    for drafted, accepted in result.step_counts:
        for position in range(1, drafted + 1):
            POSITION_DRAFTED.labels(position=str(position)).inc()
            if position <= accepted:
                POSITION_ACCEPTED.labels(position=str(position)).inc()

"""gunicorn settings, read by default from the directory gunicorn starts in (the repo root).

Threads, not sync workers: a non-streamed /v1/ completion waits for its job and a stream stays
open while the job decodes, so one request must not hold a whole process. With gthread the
worker's main thread keeps reporting to the arbiter, so long requests are not killed by
`timeout`, which then only catches a hung process.

A thread also reads its request's head, for as long as the client takes: gunicorn serves only the
buffering front (pathfinder_site.front, or a proxy that buffers requests), never clients directly.
"""

worker_class = "gthread"
# PATHFINDER_WEB_MAX_WAITING (12) of them at most wait for jobs; the rest serve everyone else.
threads = 16
timeout = 60
graceful_timeout = 30


def post_worker_init(worker):
    """A worker asked to stop ends its waiting requests at once (503 to each, its job
    cancelled) instead of holding the shutdown for up to PATHFINDER_SYNC_TIMEOUT_S."""
    from decoding.web.waiting import stop_waiting_on

    stop_waiting_on()

"""gunicorn settings, read by default from the directory gunicorn starts in (the repo root).

Threads, not sync workers: a non-streamed /v1/ completion waits for its job and a stream stays
open while the job decodes, so one request must not hold a whole process. With gthread the
worker's main thread keeps reporting to the arbiter, so long requests are not killed by
`timeout`, which then only catches a hung process.
"""

worker_class = "gthread"
threads = 8
timeout = 60
graceful_timeout = 30

"""Speculative decoding: the engine, generation jobs, their API and workers.

One shelf per process, so what a web process loads and what a worker loads stay apart:

- this package's own modules: the Django app (models, admin, migrations, commands, the Celery
  task names) and what the web side and the worker share (jobs' lifecycle, fair share,
  delivery, selectors and services, prompts and tokenizers);
- `protocol/`: the request and response shapes both processes use (the native and OpenAI
  inputs, a Batch API line's check, the OpenAI answer, error and batch-output shapes);
- `web/`: the web side's HTTP serving code (the native API's and the OpenAI-compatible API's
  views, schemas and authentication, waiting for and relaying a job's committed records);
- `worker/`: running a job on a worker (claims, leases, the loaded models and the sequence engine's
  slots, the audit sinks, replays);
- `engine/`: the speculative decoder itself, pure Python and numpy, no Django;
- `kinds/`: the model kinds a ModelSpec can name.

Arrows run from web/ and worker/ to protocol/, the shared modules, engine/ and kinds/, never
between web/ and worker/ and never back up: no module outside web/ imports it, and only the
worker's entry points (tasks.py, the replay and generate commands) import worker/
(tests/unit/test_shelves.py holds this).
"""

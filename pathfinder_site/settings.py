"""Pathfinder settings. Every value comes from an environment variable with a documented default
(docs/settings.md). Unset, they give the embedded default: SQLite and a server-less queue."""

import os
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from .env import env_bool, env_float, env_int, env_list, env_str

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(env_str("PATHFINDER_VAR_DIR", str(BASE_DIR / "var")))

# The secret key: PATHFINDER_SECRET_KEY (or the file PATHFINDER_SECRET_KEY_FILE names), else
# the random one `manage.py bootstrap_local` (make run) writes under var/, else a development
# key that a web process refuses to serve with unless debug is on (pathfinder_site.checks).
DEVELOPMENT_SECRET_KEY = "insecure-development-key-set-PATHFINDER_SECRET_KEY"
PATHFINDER_LOCAL_SECRET_KEY_FILE = VAR_DIR / "secret-key"
SECRET_KEY = env_str("PATHFINDER_SECRET_KEY", "") or (
    PATHFINDER_LOCAL_SECRET_KEY_FILE.read_text().strip()
    if PATHFINDER_LOCAL_SECRET_KEY_FILE.exists()
    else DEVELOPMENT_SECRET_KEY
)
DEBUG = env_bool("PATHFINDER_DEBUG", False)
ALLOWED_HOSTS = env_list("PATHFINDER_ALLOWED_HOSTS", "localhost,127.0.0.1,[::1]")

# --- HTTPS behind a proxy: off for the embedded default (plain HTTP on localhost) -----------------
# Cookies only over HTTPS (session and CSRF).
SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = env_bool("PATHFINDER_SECURE_COOKIES", False)
SECURE_HSTS_SECONDS = env_int("PATHFINDER_HSTS_SECONDS", 0, minimum=0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("PATHFINDER_HSTS_INCLUDE_SUBDOMAINS", False)
SECURE_HSTS_PRELOAD = env_bool("PATHFINDER_HSTS_PRELOAD", False)
SECURE_SSL_REDIRECT = env_bool("PATHFINDER_SSL_REDIRECT", False)
# Probes inside the network speak plain HTTP to the process: never redirected.
SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^readyz$", r"^metrics$"]
# The header a TLS-terminating proxy sets to "https" (e.g. X-Forwarded-Proto); only behind a
# proxy that always sets it, or clients could claim HTTPS.
_PROXY_SSL_HEADER = env_str("PATHFINDER_PROXY_SSL_HEADER", "")
SECURE_PROXY_SSL_HEADER = (
    ("HTTP_" + _PROXY_SSL_HEADER.upper().replace("-", "_"), "https") if _PROXY_SSL_HEADER else None
)
# Origins (scheme://host[:port]) the portal's forms are posted from, behind a proxy.
CSRF_TRUSTED_ORIGINS = env_list("PATHFINDER_CSRF_TRUSTED_ORIGINS", "")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_prometheus",
    "axes",
    "django_otp",
    "django_otp.plugins.otp_totp",
    "audit",
    "decoding",
    "reviewers",
    "pathfinder_site",
]

MIDDLEWARE = [
    "django_prometheus.middleware.PrometheusBeforeMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "pathfinder_site.middleware.BodySizeLimitMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django_otp.middleware.OTPMiddleware",
    "pathfinder_site.middleware.RequireMFAMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "axes.middleware.AxesMiddleware",
    "django_prometheus.middleware.PrometheusAfterMiddleware",
]

ROOT_URLCONF = "pathfinder_site.urls"
WSGI_APPLICATION = "pathfinder_site.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# --- Database: PostgreSQL in production, SQLite for the embedded default -------------------------
DATABASES = {
    "default": dj_database_url.parse(
        env_str("DATABASE_URL", f"sqlite:///{VAR_DIR / 'pathfinder.sqlite3'}"),
        conn_max_age=env_int("PATHFINDER_DB_CONN_MAX_AGE", 0, minimum=0),
    )
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    Path(DATABASES["default"]["NAME"]).parent.mkdir(parents=True, exist_ok=True)
    # The web process and the worker write concurrently: WAL lets readers proceed, IMMEDIATE
    # takes the write lock at BEGIN so two writers queue instead of failing with "locked".
    DATABASES["default"]["OPTIONS"] = {
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        "transaction_mode": "IMMEDIATE",
        "timeout": 30,
    }
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "static"
WHITENOISE_USE_FINDERS = True  # serve app static files even before collectstatic has run

# One-time messages (the admin shows a new API key's secret in one) stay in the server-side
# session, not in a cookie as Django's default storage may put them.
MESSAGE_STORAGE = "django.contrib.messages.storage.session.SessionStorage"

# --- Reviewer portal: people log in with Django auth ----------------------------------------------
LOGIN_URL = "/accounts/login/"
LOGIN_REDIRECT_URL = "/portal/"
# django-axes counts failed logins (portal and admin) per username and client address together:
# at the limit that pair is locked for a cool-off that doubles with each lockout of the pair in a
# day, whatever the password, answered 429 (reviewers/lockout.py). Failures while locked do not
# renew it. The address is REMOTE_ADDR, or behind a configured proxy the one it forwarded.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AXES_FAILURE_LIMIT = env_int("PATHFINDER_LOGIN_FAILURE_LIMIT", 10, minimum=1)
PATHFINDER_LOGIN_LOCKOUT_MINUTES = env_int("PATHFINDER_LOGIN_LOCKOUT_MINUTES", 1, minimum=1)
PATHFINDER_TRUSTED_PROXIES = env_list("PATHFINDER_TRUSTED_PROXIES", "")
AXES_COOLOFF_TIME = "reviewers.lockout.cool_off"
AXES_CLIENT_IP_CALLABLE = "reviewers.lockout.client_address"
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_COOL_OFF_ON_FAILURE_DURING_LOCKOUT = False
AXES_ENABLE_ACCESS_FAILURE_LOG = True
AXES_RESET_ON_SUCCESS = True
# Not one "AXES: BEGIN" line per process start (every manage.py call printed one).
AXES_VERBOSE = False
# With it on, a person signed in to the portal or the admin also gives a one-time password
# (TOTP, django-otp) before anything else: enrolled at /accounts/mfa/ on first use.
PATHFINDER_REQUIRE_MFA = env_bool("PATHFINDER_REQUIRE_MFA", False)
OTP_TOTP_ISSUER = "Pathfinder"

# --- Request limits -------------------------------------------------------------------------------
PATHFINDER_MAX_BODY_BYTES = env_int("PATHFINDER_MAX_BODY_BYTES", 1_048_576, minimum=1024)
DATA_UPLOAD_MAX_MEMORY_SIZE = PATHFINDER_MAX_BODY_BYTES
PATHFINDER_MAX_PROMPT_TOKENS = env_int("PATHFINDER_MAX_PROMPT_TOKENS", 4096, minimum=1)
PATHFINDER_MAX_OUTPUT_TOKENS = env_int("PATHFINDER_MAX_OUTPUT_TOKENS", 1024, minimum=1)
PATHFINDER_MAX_DRAFT_LENGTH = env_int("PATHFINDER_MAX_DRAFT_LENGTH", 16, minimum=0)
PATHFINDER_DEFAULT_DRAFT_LENGTH = env_int("PATHFINDER_DEFAULT_DRAFT_LENGTH", 4, minimum=0)

# --- Models -------------------------------------------------------------------------------------
# The ModelSpec a request gets when it names none (specs are managed in the admin).
PATHFINDER_DEFAULT_MODEL = env_str("PATHFINDER_DEFAULT_MODEL", "smollm2-135m-instruct")
# llama.cpp threads spin while they wait: threads x busy processes <= cores (docs/operations.md).
PATHFINDER_LLAMA_THREADS = env_int("PATHFINDER_LLAMA_THREADS", 2, minimum=1)
PATHFINDER_MODEL_CACHE_DIR = Path(
    env_str("PATHFINDER_MODEL_CACHE_DIR", str(VAR_DIR / "model-cache"))
)
# The file a spec with a blank path serves: the shipped Q4_1 GGUF requantized once by llama.cpp
# into this type (cached under the model cache), or "Q4_1" for the shipped file as it is.
# Q8_0 keeps the shipped file's quality and has llama.cpp's fast batch kernels; IQ4_NL is
# faster still and costs perplexity (ADR 0009 has the measurements).
PATHFINDER_DEFAULT_GGUF_TYPE = env_str("PATHFINDER_DEFAULT_GGUF_TYPE", "Q8_0")
if PATHFINDER_DEFAULT_GGUF_TYPE not in ("Q4_0", "Q4_1", "Q5_0", "Q8_0", "IQ4_NL"):
    raise ImproperlyConfigured(
        "PATHFINDER_DEFAULT_GGUF_TYPE must be one of Q4_0, Q4_1, Q5_0, Q8_0, IQ4_NL"
    )
# KV states of recent prompts each worker keeps for its llama.cpp target, so a question about
# a recently seen document skips its prefill (LRU). 512 MiB holds five 4k-token prompts of the
# default model (23 kB of keys and values per token).
PATHFINDER_PROMPT_CACHE_BYTES = env_int("PATHFINDER_PROMPT_CACHE_BYTES", 512 << 20, minimum=0)
# Prompt and output tokens of recent jobs each worker keeps for the prompt-lookup drafter to
# copy from, searched only for later jobs of the same matter (decoding/worker/references.py).
PATHFINDER_DRAFT_REFERENCE_TOKENS = env_int("PATHFINDER_DRAFT_REFERENCE_TOKENS", 65536, minimum=0)
# Nothing is fetched at run time: weights and tokenizers come from local files only.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
PATHFINDER_STUB_VOCAB_SIZE = env_int("PATHFINDER_STUB_VOCAB_SIZE", 32, minimum=2)
PATHFINDER_STUB_DRAFT_NOISE = env_float("PATHFINDER_STUB_DRAFT_NOISE", 0.5)

# --- REST API -------------------------------------------------------------------------------------
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": ["decoding.web.api.authentication.ApiKeyAuthentication"],
    "DEFAULT_PERMISSION_CLASSES": ["decoding.web.api.authentication.HasApiKey"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["decoding.protocol.parsers.JSONParser"],
    "EXCEPTION_HANDLER": "decoding.protocol.errors.exception_handler",
    "UNAUTHENTICATED_USER": None,
    "DEFAULT_THROTTLE_CLASSES": ["decoding.web.api.throttling.ApiKeyRateThrottle"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
}
# Requests per API key (DRF throttle rate syntax: "<n>/second|minute|hour|day"), counted in CACHES.
PATHFINDER_RATE_LIMIT = env_str("PATHFINDER_RATE_LIMIT", "600/minute")
# A streamed job's records are committed at most this often (ms; the steps decided meanwhile go
# into one commit): a chunk reaches its reader up to this much later, and on a CPU whose cores
# all decode the database's work per commit is paid that much less often. 0: every step.
PATHFINDER_STREAM_COMMIT_INTERVAL_MS = env_int(
    "PATHFINDER_STREAM_COMMIT_INTERVAL_MS", 100, minimum=0
)
# Fair share (decoding.fair_share): requests one API key may have waiting for their jobs or
# streaming them at once, and jobs one matter may have queued; over either, 429 naming it.
PATHFINDER_KEY_MAX_WAITING = env_int("PATHFINDER_KEY_MAX_WAITING", 4, minimum=1)
PATHFINDER_MATTER_MAX_QUEUED = env_int("PATHFINDER_MATTER_MAX_QUEUED", 64, minimum=1)
# Waiting requests one web process holds at once, whoever sends them: below its threads
# (gunicorn.conf.py), so some are always free for everyone else (health checks, the portal).
PATHFINDER_WEB_MAX_WAITING = env_int("PATHFINDER_WEB_MAX_WAITING", 12, minimum=1)
# Replays one reviewer may have queued or running at once (each re-decodes a whole job).
PATHFINDER_REVIEWER_MAX_REPLAYS = env_int("PATHFINDER_REVIEWER_MAX_REPLAYS", 2, minimum=1)
# Batch API (decoding.batches): the lines of every batch held by the queue and the workers at
# once, over all matters (the rest wait in the database, and are fed only while no interactive
# job is queued); below the worker's PATHFINDER_WORKER_SEQUENCES, so interactive calls always
# find a free slot. 1: on a 2-core worker one line at a time ran 1.06x one /v1 client, 4 at once
# 0.85x (bench/results/batch-2026-12-06*.md); raise it where a pass of several costs less than
# their sum.
PATHFINDER_BATCH_MAX_QUEUED = env_int("PATHFINDER_BATCH_MAX_QUEUED", 1, minimum=1)
# A batch's lines go in the order of their prompts (decoding.feed_order), a document's side by
# side, so its questions meet its evaluation in the worker (1.43x file order on a file of more
# documents than the prompt cache holds: bench/results/bulk-*.md). This many of one document
# (lines sharing a 64-token block or more) go out together as one turn of their matter, to be
# decoded in the same passes. 1: on a 2-core worker a pass is compute-bound, and four together
# ran 0.77-0.81x one at a time; raise it where a pass of several costs less than their sum. A
# turn may pass PATHFINDER_BATCH_MAX_QUEUED by this many less one: keep their sum below the
# worker's sequences.
PATHFINDER_BATCH_DOCUMENT_LINES = env_int("PATHFINDER_BATCH_DOCUMENT_LINES", 1, minimum=1)
# With several workers on a Redis broker, a job whose prompt holds a document goes to the queue of
# the worker that holds that document (decoding.affinity); off: every job to the shared queue.
PATHFINDER_DOCUMENT_AFFINITY = env_bool("PATHFINDER_DOCUMENT_AFFINITY", True)
# An input file's limits (OpenAI's): lines, and bytes.
PATHFINDER_BATCH_MAX_LINES = env_int("PATHFINDER_BATCH_MAX_LINES", 50_000, minimum=1)
PATHFINDER_BATCH_MAX_FILE_BYTES = env_int("PATHFINDER_BATCH_MAX_FILE_BYTES", 200 << 20, minimum=1)
# The bytes one matter's files (its uploads and its batches' output and error files) may hold in
# the database; past it an upload or a new batch is a 413 naming it (decoding.batches).
PATHFINDER_MATTER_STORAGE_BYTES = env_int("PATHFINDER_MATTER_STORAGE_BYTES", 10 << 30, minimum=1)
# How long POST /v1/completions and /v1/chat/completions wait for a non-streamed job.
PATHFINDER_SYNC_TIMEOUT_S = env_int("PATHFINDER_SYNC_TIMEOUT_S", 300, minimum=1)

SPECTACULAR_SETTINGS = {
    "TITLE": "Pathfinder API",
    "DESCRIPTION": "Audited speculative decoding: OpenAI-compatible endpoints under /v1/ and "
    "the native API under /api/v1/. Authenticate with `Authorization: Bearer <API key>`.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SERVE_PERMISSIONS": ["rest_framework.permissions.AllowAny"],
    "SERVE_AUTHENTICATION": [],
    "COMPONENT_SPLIT_REQUEST": True,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "ENUM_NAME_OVERRIDES": {
        "JobStatusEnum": "decoding.models.GenerationJob.Status",
    },
}

# --- Operations endpoints ------------------------------------------------------------------------
# A bearer token /metrics and the detailed /readyz require; empty: /metrics is open (a private
# network's scraper) and /readyz only ever says ready or not.
PATHFINDER_METRICS_TOKEN = env_str("PATHFINDER_METRICS_TOKEN", "")
# Readiness (its broker and worker checks) and the database gauges are recomputed at most this
# often per process, so a storm of probes or scrapes costs one check per interval.
PATHFINDER_OPS_CACHE_S = env_float("PATHFINDER_OPS_CACHE_S", 5.0)

# --- Cache: the throttles' counters. Shared Redis in production; per-process memory embedded ----
CACHE_URL = env_str("CACHE_URL", "")
CACHES = {
    "default": (
        {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": CACHE_URL}
        if CACHE_URL
        else {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}
    )
}

# --- The global log's signed checkpoints ---------------------------------------------------------
# The log's name inside every checkpoint; make it unique to this deployment.
PATHFINDER_LOG_ORIGIN = env_str("PATHFINDER_LOG_ORIGIN", "pathfinder.local/audit-log")
# The Ed25519 signing key (C2SP signed-note strings). Only where checkpoints are signed (beat,
# manage.py checkpoint); a missing file fails closed (manage.py bootstrap_local makes one).
PATHFINDER_CHECKPOINT_KEY_FILE = Path(
    env_str("PATHFINDER_CHECKPOINT_KEY_FILE", str(VAR_DIR / "checkpoint-signing.key"))
)
# What every other host verifies with: the log's verifier key, then any retired ones, comma
# separated. Empty: derived from the key file (one host holding both, as the embedded default).
PATHFINDER_CHECKPOINT_VERIFIER_KEY = env_list("PATHFINDER_CHECKPOINT_VERIFIER_KEY", "")
# Beat signs a checkpoint this often when the log grew, so a sealed trail soon has one to export.
PATHFINDER_CHECKPOINT_INTERVAL_S = env_int("PATHFINDER_CHECKPOINT_INTERVAL_S", 60, minimum=10)
# Every signed checkpoint is written here once its witnesses answered, one file per tree size,
# never overwritten. In production, a write-once store (object lock) the database cannot touch.
PATHFINDER_CHECKPOINT_PUBLISH_DIR = Path(
    env_str("PATHFINDER_CHECKPOINT_PUBLISH_DIR", str(VAR_DIR / "published-checkpoints"))
)
# Witnesses (C2SP tlog-witness) asked to cosign each checkpoint: VERIFIER_KEY@URL, comma separated.
PATHFINDER_WITNESSES = env_list("PATHFINDER_WITNESSES", "")
# How many must cosign; fewer raises the alert (metric and /readyz). Default: all of them.
PATHFINDER_WITNESS_QUORUM = env_int(
    "PATHFINDER_WITNESS_QUORUM", len(PATHFINDER_WITNESSES), minimum=0
)
if len(PATHFINDER_WITNESSES) < PATHFINDER_WITNESS_QUORUM:
    raise ImproperlyConfigured(
        f"PATHFINDER_WITNESS_QUORUM is {PATHFINDER_WITNESS_QUORUM}, but only "
        f"{len(PATHFINDER_WITNESSES)} witnesses are configured"
    )
PATHFINDER_WITNESS_TIMEOUT_S = env_float("PATHFINDER_WITNESS_TIMEOUT_S", 10.0)
# An RFC 3161 time-stamping authority for every checkpoint; empty: none.
PATHFINDER_TSA_URL = env_str("PATHFINDER_TSA_URL", "")

# --- Celery: Redis in production, kombu's filesystem transport for the embedded default ----------
CELERY_BROKER_URL = env_str("CELERY_BROKER_URL", "filesystem://")
if CELERY_BROKER_URL == "filesystem://":
    # The same transport with its host named: kombu warns at each start of one without it.
    CELERY_BROKER_URL = "filesystem://localhost/"
PATHFINDER_QUEUE_DIR = Path(env_str("PATHFINDER_QUEUE_DIR", str(VAR_DIR / "queue")))
if CELERY_BROKER_URL.startswith("filesystem://"):
    # kombu's filesystem transport: producer and consumer share one folder of message files.
    (PATHFINDER_QUEUE_DIR / "messages").mkdir(parents=True, exist_ok=True)
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(PATHFINDER_QUEUE_DIR / "messages"),
        "data_folder_out": str(PATHFINDER_QUEUE_DIR / "messages"),
        "control_folder": str(PATHFINDER_QUEUE_DIR / "control"),
        "store_processed": False,
        "polling_interval": 0.2,
    }
CELERY_TASK_DEFAULT_QUEUE = env_str("PATHFINDER_TASK_QUEUE", "pathfinder")
# Workers publish "records committed" notices here (Redis pub/sub) so web processes relay a
# stream without polling; empty (the embedded default) means web processes poll the database.
PATHFINDER_EVENTS_URL = env_str(
    "PATHFINDER_EVENTS_URL", CELERY_BROKER_URL if CELERY_BROKER_URL.startswith("redis") else ""
)
CELERY_TASK_IGNORE_RESULT = True  # job state lives in the database, not a result backend
CELERY_TASK_ACKS_LATE = True  # safe because run_generation claims its job atomically
# A pool process killed mid-task (kill -9, OOM) puts its message back rather than acking it.
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
# Jobs a worker decodes at once, together in one sequence engine (one llama.cpp pass carries every
# job's positions): a pool of that many threads. 1 is a prefork pool of one process decoding one
# job at a time; `celery worker -c N` sets the slots instead. 8 by default: shared passes beat one
# job at a time from 2 concurrent jobs on (bench/results/throughput-2026-12-04.md, ADR 0015).
PATHFINDER_WORKER_SEQUENCES = env_int("PATHFINDER_WORKER_SEQUENCES", 8, minimum=1)
CELERY_WORKER_POOL = "threads" if PATHFINDER_WORKER_SEQUENCES > 1 else "prefork"
CELERY_WORKER_CONCURRENCY = PATHFINDER_WORKER_SEQUENCES
CELERY_TASK_TIME_LIMIT = env_int("PATHFINDER_TASK_TIME_LIMIT", 3600, minimum=1)
# A prefork child loads its models before it reports up (pathfinder_site.celery): a large model
# on a cold disk may take minutes, which must not count as a child that failed to start.
CELERY_WORKER_PROC_ALIVE_TIMEOUT = 600
# Queue priorities a job can be sent at (Redis only; kombu's filesystem transport is FIFO).
PATHFINDER_QUEUE_PRIORITIES = 10
if CELERY_BROKER_URL.startswith("redis"):
    # Redis redelivers an unacknowledged message after this long: it must exceed the longest
    # task, or a job still decoding would be handed to a second worker (which then waits).
    # Priorities (decoding.fair_share.queue_priority): one list per step, 0 taken first.
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "visibility_timeout": CELERY_TASK_TIME_LIMIT + 600,
        "priority_steps": list(range(PATHFINDER_QUEUE_PRIORITIES)),
        "sep": ":",
        "queue_order_strategy": "priority",
    }
# A running attempt renews its lease while it decodes; a lapsed lease means its worker died.
PATHFINDER_JOB_LEASE_S = env_int("PATHFINDER_JOB_LEASE_S", 60, minimum=2)
PATHFINDER_MAX_ATTEMPTS = env_int("PATHFINDER_MAX_ATTEMPTS", 3, minimum=1)
# The recovery sweep re-queues running jobs whose lease lapsed and jobs queued this long ago.
PATHFINDER_RECOVERY_INTERVAL_S = env_int("PATHFINDER_RECOVERY_INTERVAL_S", 30, minimum=1)
PATHFINDER_REQUEUE_AFTER_S = env_int("PATHFINDER_REQUEUE_AFTER_S", 300, minimum=1)
PATHFINDER_VERIFY_INTERVAL_S = env_int("PATHFINDER_VERIFY_INTERVAL_S", 3600, minimum=10)
# How often beat destroys content past its matter's retention period (reviewers.destruction).
PATHFINDER_RETENTION_INTERVAL_S = env_int("PATHFINDER_RETENTION_INTERVAL_S", 3600, minimum=10)
# Processes verify_chain --all splits the store's trails over (one snapshot, exported to each);
# 0: one per core, at most 4. PostgreSQL only.
PATHFINDER_VERIFY_WORKERS = env_int("PATHFINDER_VERIFY_WORKERS", 0, minimum=0)
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# Fail a submission fast (503, job marked failed) rather than hang when the broker is down.
CELERY_TASK_PUBLISH_RETRY_POLICY = {"max_retries": 2, "interval_start": 0, "interval_step": 0.5}
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
CELERY_BEAT_SCHEDULE = {
    "checkpoint-the-global-log": {
        "task": "audit.create_checkpoint",
        "schedule": PATHFINDER_CHECKPOINT_INTERVAL_S,
    },
    "verify-every-trail": {"task": "audit.verify_all", "schedule": PATHFINDER_VERIFY_INTERVAL_S},
    "verify-the-custody-chain": {
        "task": "reviewers.verify_custody",
        "schedule": PATHFINDER_VERIFY_INTERVAL_S,
    },
    "chain-pending-views": {"task": "reviewers.chain_pending_views", "schedule": 5},
    "destroy-expired-content": {
        "task": "reviewers.destroy_expired",
        "schedule": PATHFINDER_RETENTION_INTERVAL_S,
    },
    "advance-batches": {"task": "decoding.advance_batches", "schedule": 5},
    "recover-lost-jobs": {
        "task": "decoding.recover_jobs",
        "schedule": PATHFINDER_RECOVERY_INTERVAL_S,
    },
}

# --- Logging: one JSON object per line on stderr -----------------------------------------------
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"json": {"()": "pathfinder_site.logging.JsonFormatter"}},
    "handlers": {"stderr": {"class": "logging.StreamHandler", "formatter": "json"}},
    "root": {"handlers": ["stderr"], "level": env_str("PATHFINDER_LOG_LEVEL", "INFO")},
}

"""QTG settings, read from the environment with embedded defaults.

With no environment at all the product runs on SQLite (WAL) and an embedded Celery broker,
so one command starts everything on a machine with only Python. ``DATABASE_URL`` switches to
PostgreSQL and ``CELERY_BROKER_URL`` to Redis or RabbitMQ.
"""

import json
import os
from datetime import timedelta
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from ops.logs import logging_config
from qtg.configuration import env
from qtg.core.contract import CONTRACT_VERSION
from qtg.profile import EMBEDDED_AUDIT_KEY, production_problems, profile_from_env
from qtg.queues import all_queues, task_routes

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(env("QTG_VAR_DIR", BASE_DIR / "var"))
VAR_DIR.mkdir(parents=True, exist_ok=True)


def env_bool(name: str, default: bool) -> bool:
    raw = env(name)
    if raw is None:
        return default
    return raw.strip().lower() in {"1", "true", "yes", "on"}


# "embedded" is the one-command demo (`make run`, `make test` set it); "production" turns off
# everything demo-only. Named exactly or the start stops (qtg/profile.py): never guessed.
QTG_PROFILE = profile_from_env(env("QTG_PROFILE"))
EMBEDDED = QTG_PROFILE == "embedded"

SECRET_KEY = env("DJANGO_SECRET_KEY", "qtg-embedded-insecure-key" if EMBEDDED else "")
DEBUG = env_bool("DJANGO_DEBUG", EMBEDDED)
# Django's test client calls itself "testserver": a host only the embedded demo answers to.
ALLOWED_HOSTS = env(
    "DJANGO_ALLOWED_HOSTS", "localhost,127.0.0.1,testserver" if EMBEDDED else "localhost,127.0.0.1"
).split(",")

INSTALLED_APPS = [
    "qtg.admin_site.QTGAdminConfig",  # django.contrib.admin with the console's site
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework.authtoken",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_fsm",
    "movements",
    "reservations",
    "callbacks",
    "django_structlog",
    "ops",
]

MIDDLEWARE = [
    # HTTP request metrics (django-prometheus): first and last, so they time everything.
    "django_prometheus.middleware.PrometheusBeforeMiddleware",
    "django.middleware.security.SecurityMiddleware",
    # Static files (admin, API docs) served by the web process itself, DEBUG or not.
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # Binds a request id (and the user) to every log line of the request.
    "django_structlog.middlewares.RequestMiddleware",
    # Under /api/ every failure is a problem document with the request id, never HTML.
    "movements.api.exceptions.ApiProblemMiddleware",
]

ROOT_URLCONF = "qtg.urls"

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

WSGI_APPLICATION = "qtg.wsgi.application"

DATABASE_URL = env("DATABASE_URL", "")
if DATABASE_URL:
    # Persistent connections: a web request or a worker's task re-uses its process's
    # connection (checked before use) instead of opening one each time, which on PostgreSQL
    # costs more than most of the statements sent over it. 0 closes it after each.
    DATABASES = {
        "default": dj_database_url.parse(
            DATABASE_URL,
            conn_max_age=int(env("QTG_DB_CONN_MAX_AGE", "60")),
            conn_health_checks=True,
        )
    }
    if DATABASES["default"]["ENGINE"].endswith("postgresql"):
        # A database that never answers (a partition, a host gone) fails a connection attempt
        # after this long, not libpq's two minutes: a scrape gets its 503, a task its error.
        DATABASES["default"].setdefault("OPTIONS", {}).setdefault(
            "connect_timeout", int(env("QTG_DB_CONNECT_TIMEOUT", "5"))
        )
else:
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": env("QTG_SQLITE_PATH", str(VAR_DIR / "qtg.sqlite3")),
            "OPTIONS": {
                # WAL lets the web, worker and beat processes read while one writes;
                # IMMEDIATE takes the write lock up front so two writers queue instead of
                # deadlocking on a lock upgrade.
                "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
                "transaction_mode": "IMMEDIATE",
                "timeout": 30,
            },
            "TEST": {"NAME": env("QTG_SQLITE_TEST_PATH", str(VAR_DIR / "test.sqlite3"))},
        }
    }
DB_IS_POSTGRES = DATABASES["default"]["ENGINE"].endswith("postgresql")

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"


LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True
# One way of writing a datetime across the console, with its zone (qtg/formats/en/formats.py).
FORMAT_MODULE_PATH = ["qtg.formats"]

STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "static"
STATIC_ROOT.mkdir(parents=True, exist_ok=True)
if not EMBEDDED:
    # Hashed, compressed files from `collectstatic` (part of `manage.py qtg_prestart`).
    STORAGES = {
        "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
        "staticfiles": {"BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"},
    }

LOGIN_URL = "admin:login"

# --- Movements -------------------------------------------------------------------------------
# The shipped templates name the sandbox venues' executors; a deployment with its own venue
# apps points this at its own templates.
QTG_ROUTE_TEMPLATE_DIR = Path(
    env("QTG_ROUTE_TEMPLATE_DIR", BASE_DIR / "movements" / "route_templates")
)
# Approval window given to a movement that does not ask for its own.
QTG_DEFAULT_APPROVAL_TTL = timedelta(
    seconds=int(env("QTG_DEFAULT_APPROVAL_TTL_SECONDS", 24 * 3600))
)
# The address book (README, "Approval policies and the address book"): when enforced, a
# movement's destination must be a vetted, active entry for its asset and network, at create
# and again at dispatch. A new entry is usable only after the cool-down (none in the embedded
# demo, a day by default elsewhere). Enforced in production; in the embedded profile only when
# asked (QTG_ADDRESS_BOOK_ENFORCED=1), so integrations trying QTG against the sandbox's venue
# accounts are not refused by a book they have not filled yet.
QTG_ADDRESS_BOOK_ENFORCED = env_bool("QTG_ADDRESS_BOOK_ENFORCED", not EMBEDDED)
QTG_ADDRESS_COOLDOWN = timedelta(
    seconds=float(env("QTG_ADDRESS_COOLDOWN_SECONDS", 0 if EMBEDDED else 24 * 3600))
)
# Force-complete, force-fail, cancel in transit and resolving UNKNOWN as never happened are
# proposed by one supervisor and confirmed by another within this window. On in production;
# in the embedded profile only when asked (QTG_TWO_PERSON_OVERRIDES=1), where one supervisor
# (and the API's single cancel call with acknowledge_funds_in_transit) does it alone.
QTG_TWO_PERSON_OVERRIDES = env_bool("QTG_TWO_PERSON_OVERRIDES", not EMBEDDED)
QTG_OVERRIDE_PROPOSAL_TTL = timedelta(seconds=float(env("QTG_OVERRIDE_PROPOSAL_TTL_SECONDS", 3600)))

# --- REST API --------------------------------------------------------------------------------
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.TokenAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_FILTER_BACKENDS": ["django_filters.rest_framework.DjangoFilterBackend"],
    "DEFAULT_PAGINATION_CLASS": "rest_framework.pagination.PageNumberPagination",
    "PAGE_SIZE": 50,
    # One error shape for every 4xx of the API (movements/api/exceptions.py).
    "EXCEPTION_HANDLER": "movements.api.exceptions.api_exception_handler",
}

SPECTACULAR_SETTINGS = {
    "TITLE": "QTG API",
    "DESCRIPTION": "Move crypto funds between venues without losing track of money in flight.",
    # The integrator contract's version (qtg/core/contract.py), as payloads and headers say it.
    "VERSION": CONTRACT_VERSION,
    "SERVE_INCLUDE_SCHEMA": False,
    # OpenAPI 3.1 for its ``webhooks`` section: the event catalogue (callbacks/catalogue.py).
    "OAS_VERSION": "3.1.0",
    "WEBHOOKS": "callbacks.catalogue.WEBHOOKS",
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "qtg.api_docs.nullable_as_type_lists",
        "qtg.api_docs.problem_headers",
    ],
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "ENUM_NAME_OVERRIDES": {
        "NodeKindEnum": "movements.choices.NODE_KINDS",
        "EventKindEnum": "movements.models.MovementEvent.Kind",
    },
}

# --- Celery ----------------------------------------------------------------------------------
CELERY_BROKER_URL = env("CELERY_BROKER_URL", "filesystem://")
if CELERY_BROKER_URL == "filesystem://":
    _BROKER_DIR = VAR_DIR / "broker"
    for _sub in ("queue", "processed", "control", "corrupt"):
        (_BROKER_DIR / _sub).mkdir(parents=True, exist_ok=True)
    # kombu's filesystem layout, handed over atomically (qtg/broker.py: kombu #1551).
    CELERY_BROKER_TRANSPORT = "qtg.broker:Transport"
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(_BROKER_DIR / "queue"),
        "data_folder_out": str(_BROKER_DIR / "queue"),
        "processed_folder": str(_BROKER_DIR / "processed"),
        # Broadcast/control exchanges (kombu's default is ./control in the working directory).
        "control_folder": str(_BROKER_DIR / "control"),
        "store_processed": False,
        # Message files that cannot be read are moved here, never raised into a worker.
        "corrupt_folder": str(_BROKER_DIR / "corrupt"),
    }
# One queue name per deployment (tests use a fresh one per run so stale messages never matter).
CELERY_TASK_DEFAULT_QUEUE = env("QTG_CELERY_QUEUE", "qtg")
# One queue per concern, named from that one (qtg/queues.py): sweeps, venue calls, webhooks.
CELERY_TASK_ROUTES = task_routes(CELERY_TASK_DEFAULT_QUEUE)
QTG_CELERY_QUEUES = all_queues(CELERY_TASK_DEFAULT_QUEUE)
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_ACKS_LATE = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_ALWAYS_EAGER = env_bool("CELERY_TASK_ALWAYS_EAGER", False)
CELERY_BEAT_SCHEDULE_FILENAME = str(VAR_DIR / "celerybeat-schedule")
# Beat may run on several machines: only the holder of the "beat" lease sends (qtg/leader.py);
# another takes over when the leader has not renewed it for this long.
CELERY_BEAT_SCHEDULER = "qtg.leader:LeaderScheduler"
# Periodic work. Each entry names a task by its stable name; intervals in seconds.
QTG_TICK_SECONDS = float(env("QTG_TICK_SECONDS", "2"))


def _every(seconds: float, task: str) -> dict:
    """A beat entry whose message expires once a few later ones are due: a worker that was
    busy (a long venue call on the solo pool, a pause) finds a backlog of the same sweep and
    discards the stale copies instead of running each one."""
    return {
        "task": task,
        "schedule": seconds,
        "options": {"expires": max(seconds * 3, QTG_SWEEP_EXPIRES_MIN_SECONDS)},
    }


# How often the gauges /metrics serves are recomputed (ops/gauges.py): a scrape reads them.
QTG_GAUGES_SECONDS = float(env("QTG_GAUGES_SECONDS", "15"))
# A sweep message is never discarded sooner than this after beat sent it.
QTG_SWEEP_EXPIRES_MIN_SECONDS = float(env("QTG_SWEEP_EXPIRES_MIN_SECONDS", "5"))
# While a queue holds this many messages, beat sends no sweep whose last message may still be
# waiting in it (qtg/leader.py): a worker behind finds one of each, not a backlog of copies.
QTG_SWEEP_BACKLOG = int(env("QTG_SWEEP_BACKLOG", "4"))
CELERY_BEAT_SCHEDULE = {
    "dispatch-ready-nodes": _every(QTG_TICK_SECONDS, "movements.dispatch_ready"),
    "observe-submitted-nodes": _every(QTG_TICK_SECONDS, "movements.observe_submitted"),
    "recover-unknown-nodes": _every(QTG_TICK_SECONDS * 5, "movements.recover_unknown"),
    "reap-expired-leases": _every(QTG_TICK_SECONDS * 5, "movements.reap_leases"),
    "expire-pending-approvals": _every(
        float(env("QTG_EXPIRE_APPROVALS_SECONDS", "30")), "movements.expire_approvals"
    ),
    "deliver-due-callbacks": _every(QTG_TICK_SECONDS * 5, "callbacks.deliver_due"),
    "detect-stuck-nodes": _every(QTG_TICK_SECONDS * 15, "movements.detect_stuck"),
    "purge-idempotency-keys": _every(3600.0, "movements.purge_idempotency_keys"),
    "refresh-gauges": _every(QTG_GAUGES_SECONDS, "ops.refresh_gauges"),
    # FAILED chain transfers whose transactions could still be mined (venues/evm/watch.py).
    "watch-concluded-chain-transfers": _every(QTG_TICK_SECONDS * 15, "venues.watch_concluded"),
}

QTG_SCHEDULER_LEASE_SECONDS = float(
    env("QTG_SCHEDULER_LEASE_SECONDS", max(6.0, QTG_TICK_SECONDS * 3))
)

# --- Execution (movements/services/execution/) -----------------------------------------------
# How rows reach the database (movements/services/writers.py): "auto" (PostgreSQL's own
# one-statement writer on PostgreSQL, the portable ORM writer elsewhere), "orm", "postgresql".
QTG_ROW_WRITER = env("QTG_ROW_WRITER", "auto")
# A claimed node's lease; a worker that dies loses its nodes to the reaper after this long.
QTG_LEASE_SECONDS = float(env("QTG_LEASE_SECONDS", "60"))
# Every worker process reaps expired leases itself, this often, from a thread of its own
# (movements/services/execution/reaper.py): a dead or paused worker's nodes move on whether or
# not beat's messages reach a worker, and while the worker's tasks are busy in venue calls.
QTG_REAP_SECONDS = float(env("QTG_REAP_SECONDS", min(QTG_TICK_SECONDS * 5, QTG_LEASE_SECONDS / 4)))
QTG_OBSERVE_POLL_SECONDS = float(env("QTG_OBSERVE_POLL_SECONDS", QTG_TICK_SECONDS))
QTG_RETRY_BASE_SECONDS = float(env("QTG_RETRY_BASE_SECONDS", "2"))
QTG_RETRY_MAX_SECONDS = float(env("QTG_RETRY_MAX_SECONDS", "300"))
# How many times the venue may refuse or fail a node's attempt before it is FAILED (claims lost
# to worker deaths and waits the venue asked for do not count).
QTG_MAX_DISPATCHES = int(env("QTG_MAX_DISPATCHES", "10"))
# A venue that keeps a node waiting (rate limit, maintenance) this long asks a person to look.
QTG_WAIT_ATTENTION_SECONDS = float(env("QTG_WAIT_ATTENTION_SECONDS", "3600"))
QTG_DISPATCH_BATCH = int(env("QTG_DISPATCH_BATCH", "50"))
# How many due nodes one claim transaction locks and leases (one SELECT .. SKIP LOCKED). The
# worker runs them one after another (renewing the leases of those waiting) and writes each
# step's results for the batch in one transaction, or sooner once QTG_RESULT_WRITE_SECONDS
# have gone by since its last write; sweeps fanned out to other workers take other batches.
# The claim size adapts within a sweep: it starts at QTG_CLAIM_BATCH_MIN and doubles while
# claims come back full, up to QTG_CLAIM_BATCH (small batches while the queue is short, so a
# worker's death parks few nodes; large ones while it is long).
QTG_CLAIM_BATCH = int(env("QTG_CLAIM_BATCH", "50"))
QTG_CLAIM_BATCH_MIN = int(env("QTG_CLAIM_BATCH_MIN", "8"))
# A sweep's first claim takes at most this many action nodes (0: no limit); the tick fans out
# a sweep for each further action node due, so an idle worker takes it at once instead of it
# waiting in the claim behind another node's venue calls. Later claims of the sweep (a long
# queue, no worker idle) take any number.
QTG_CLAIM_FIRST_ACTIONS = int(env("QTG_CLAIM_FIRST_ACTIONS", "1"))
# A node SUBMITTED, OBSERVING or UNKNOWN longer than this (unless its executor says otherwise)
# makes its movement need attention: shown in "Needs me", one request_attention callback.
QTG_STUCK_AFTER_SECONDS = float(env("QTG_STUCK_AFTER_SECONDS", "1800"))
QTG_RESULT_WRITE_SECONDS = float(env("QTG_RESULT_WRITE_SECONDS", "1"))
# A claimed batch of at most this many nodes writes each result as it comes (latency); larger
# ones hold results for QTG_RESULT_WRITE_SECONDS (fewer transactions), except a submit's answer
# where its movement has another side-effect node (written at once: lost with a worker, it
# would leave that movement to a person).
QTG_RESULT_WRITE_AT_ONCE_BELOW = int(env("QTG_RESULT_WRITE_AT_ONCE_BELOW", "2"))
QTG_SWEEP_FANOUT = int(env("QTG_SWEEP_FANOUT", "4"))

# --- Sandbox venues and callbacks ------------------------------------------------------------
# Simulated exchange and chain: on for the embedded demo and tests, never in production.
QTG_SANDBOX_ENABLED = env_bool("QTG_SANDBOX_ENABLED", EMBEDDED)
if QTG_SANDBOX_ENABLED:
    # The simulated venues are an app of their own: production leaves it out, so none of its
    # executors, tables or admin pages exist there.
    INSTALLED_APPS.append("sandbox")
# Which app serves an executor name that several installed apps provide (name -> app label),
# as JSON, e.g. {"cex_withdraw": "venues"}. A name left ambiguous stops the start-up.
QTG_EXECUTORS = json.loads(env("QTG_EXECUTORS", "{}"))

# --- Real venues (venues app: EVM chains, exchanges, CCTP, Solana; DESIGN.md section 8) -------
# off: the sandbox serves every executor name it provides (the embedded default); local: the
# real executors serve them, against the stand-ins `make run` starts as child processes;
# live: the real executors against the venues of venues/chains.yaml and venues/exchanges.yaml
# (the production default). QTG_EXECUTORS still decides a name it lists.
QTG_VENUES = env("QTG_VENUES", "off" if EMBEDDED else "live").strip().lower()
if QTG_VENUES not in ("off", "local", "live"):
    raise ImproperlyConfigured(f"QTG_VENUES must be off, local or live (got {QTG_VENUES!r})")
INSTALLED_APPS.append("venues")
# Where a name is provided by both the sandbox and the venues app and QTG_EXECUTORS is silent.
QTG_EXECUTOR_DEFAULT_PROVIDER = "sandbox" if QTG_VENUES == "off" else "venues"
QTG_CHAINS_CONFIG = env("QTG_CHAINS_CONFIG", "")
# At most this many nonces of one EVM sender allocated and not yet mined (pipelined sends:
# a sender's transfers do not wait for each other's receipts, up to this bound).
QTG_EVM_MAX_IN_FLIGHT = int(env("QTG_EVM_MAX_IN_FLIGHT", "64"))
QTG_EXCHANGES_CONFIG = env("QTG_EXCHANGES_CONFIG", "")
# Circle's attestation API (Iris) answers 429 and blocks a caller for 5 minutes past this many
# requests in a second; every worker shares one bucket that stays below it.
QTG_IRIS_REQUESTS_PER_SECOND = float(env("QTG_IRIS_REQUESTS_PER_SECOND", "35"))
# Multiplies the simulated chains' block intervals (tests run the chains faster).
QTG_SANDBOX_TIME_SCALE = float(env("QTG_SANDBOX_TIME_SCALE", "1"))
# How long after its fenced deadline the simulated exchange still carries out a withdrawal
# request (a signed request's validity, like Binance's recvWindow); later ones it refuses.
QTG_SANDBOX_REQUEST_VALIDITY_SECONDS = float(env("QTG_SANDBOX_REQUEST_VALIDITY_SECONDS", "30"))
# Webhook targets on private/loopback addresses are refused unless this is on.
QTG_CALLBACKS_ALLOW_PRIVATE_TARGETS = env_bool("QTG_CALLBACKS_ALLOW_PRIVATE_TARGETS", EMBEDDED)
# Attempts before a delivery is DEAD, and the exponential backoff between them: the n-th retry
# waits BACKOFF * 2**(n-1) seconds (capped, +0-10% jitter). Defaults: 10 attempts over ~4 hours.
QTG_CALLBACKS_MAX_ATTEMPTS = int(env("QTG_CALLBACKS_MAX_ATTEMPTS", "10"))
QTG_CALLBACKS_BACKOFF_SECONDS = float(env("QTG_CALLBACKS_BACKOFF_SECONDS", "30"))
QTG_CALLBACKS_BACKOFF_MAX_SECONDS = float(env("QTG_CALLBACKS_BACKOFF_MAX_SECONDS", str(6 * 3600)))
# Per-attempt HTTP timeout (connect, read, write): one slow receiver holds one task briefly.
QTG_CALLBACKS_TIMEOUT_SECONDS = float(env("QTG_CALLBACKS_TIMEOUT_SECONDS", "5"))
# ... and the whole attempt (connect, send, the answer's headers and excerpt) ends by this
# deadline: a receiver answering a byte at a time holds the webhook worker no longer.
QTG_CALLBACKS_DEADLINE_SECONDS = float(env("QTG_CALLBACKS_DEADLINE_SECONDS", "15"))
# A due delivery whose task was queued longer ago than this is queued again by the sweep.
# How long a rotated webhook secret keeps signing next to its successor (receivers switch
# within this window); a client may ask for a shorter overlap per rotation.
QTG_WEBHOOK_SECRET_OVERLAP_SECONDS = float(
    env("QTG_WEBHOOK_SECRET_OVERLAP_SECONDS", str(24 * 3600))
)
# The Idempotency-Key of a movement is kept this many days; afterwards the hourly purge
# forgets it and the same key creates a new movement (IETF Idempotency-Key draft).
QTG_IDEMPOTENCY_KEY_RETENTION = timedelta(
    days=float(env("QTG_IDEMPOTENCY_KEY_RETENTION_DAYS", "7"))
)
QTG_CALLBACKS_REQUEUE_AFTER_SECONDS = float(env("QTG_CALLBACKS_REQUEUE_AFTER_SECONDS", "120"))

# --- Notifications (notifications/) ---------------------------------------------------------
# The people who can act on a movement waiting for approval, in MANUAL_INTERVENTION or needing
# attention, or on an override proposal, are emailed (per their preferences, at once or in the
# digest) through an outbox the workers send; optionally the team's chat webhook is posted too.
INSTALLED_APPS.append("notifications")
# Email through Django's backend: printed to the web/worker output in the embedded demo, SMTP
# in production (EMAIL_HOST and friends).
EMAIL_BACKEND = env(
    "QTG_EMAIL_BACKEND",
    "django.core.mail.backends.console.EmailBackend"
    if EMBEDDED
    else "django.core.mail.backends.smtp.EmailBackend",
)
EMAIL_HOST = env("EMAIL_HOST", "localhost")
EMAIL_PORT = int(env("EMAIL_PORT", "25"))
EMAIL_HOST_USER = env("EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = env("EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = env_bool("EMAIL_USE_TLS", False)
DEFAULT_FROM_EMAIL = env("DEFAULT_FROM_EMAIL", "QTG <qtg@localhost>")
# The console's address, for the links in notifications.
QTG_CONSOLE_URL = env("QTG_CONSOLE_URL", "http://127.0.0.1:8000" if EMBEDDED else "")
# A chat service's incoming webhook (Slack, Mattermost, ...): each notification is POSTed to it
# as JSON {"text", "kind", "movement", "url"}. Unset: no chat.
QTG_NOTIFY_CHAT_WEBHOOK_URL = env("QTG_NOTIFY_CHAT_WEBHOOK_URL", "")
QTG_NOTIFY_TIMEOUT_SECONDS = float(env("QTG_NOTIFY_TIMEOUT_SECONDS", "10"))
EMAIL_TIMEOUT = QTG_NOTIFY_TIMEOUT_SECONDS
QTG_NOTIFY_MAX_ATTEMPTS = int(env("QTG_NOTIFY_MAX_ATTEMPTS", "8"))
QTG_NOTIFY_BACKOFF_SECONDS = float(env("QTG_NOTIFY_BACKOFF_SECONDS", "30"))
QTG_NOTIFY_BACKOFF_MAX_SECONDS = float(env("QTG_NOTIFY_BACKOFF_MAX_SECONDS", "3600"))
QTG_NOTIFY_REQUEUE_AFTER_SECONDS = float(env("QTG_NOTIFY_REQUEUE_AFTER_SECONDS", "120"))
# How often the digest of what people asked to be told in the digest is sent.
QTG_NOTIFY_DIGEST_SECONDS = float(env("QTG_NOTIFY_DIGEST_SECONDS", "3600"))
CELERY_BEAT_SCHEDULE["send-due-notifications"] = _every(
    QTG_TICK_SECONDS * 5, "notifications.send_due"
)
CELERY_BEAT_SCHEDULE["send-notification-digests"] = _every(
    QTG_NOTIFY_DIGEST_SECONDS, "notifications.digest"
)

# --- Operability (ops/) ---------------------------------------------------------------------
# Counters and histograms of every process of a machine meet in this directory (read by
# /metrics); it must be set before prometheus-client is first imported, hence here.
os.environ.setdefault("PROMETHEUS_MULTIPROC_DIR", str(VAR_DIR / "metrics"))
Path(os.environ["PROMETHEUS_MULTIPROC_DIR"]).mkdir(parents=True, exist_ok=True)
# /metrics requires `Authorization: Bearer <token>` when set. Without one it answers only where
# QTG_METRICS_OPEN is on (the embedded default); production refuses to start with neither.
QTG_METRICS_TOKEN = env("QTG_METRICS_TOKEN", "")
QTG_METRICS_OPEN = env_bool("QTG_METRICS_OPEN", EMBEDDED)
# /health/ fails when no periodic sweep has finished on a worker for this long.
QTG_HEALTH_MAX_SWEEP_AGE_SECONDS = float(
    env("QTG_HEALTH_MAX_SWEEP_AGE_SECONDS", max(60.0, QTG_TICK_SECONDS * 15))
)
# /health/ready runs its checks at once and answers within this budget: a check that has not
# answered by then (a dependency down or hanging) fails as "no answer within ...".
QTG_HEALTH_BUDGET_SECONDS = float(env("QTG_HEALTH_BUDGET_SECONDS", "0.8"))
# A worker whose heartbeat row is older than this is not counted as serving its queues.
QTG_HEALTH_MAX_WORKER_AGE_SECONDS = float(env("QTG_HEALTH_MAX_WORKER_AGE_SECONDS", "30"))
QTG_HEARTBEAT_WRITE_SECONDS = float(env("QTG_HEARTBEAT_WRITE_SECONDS", "5"))
# Celery logs through Django's LOGGING (one format for every process).
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
# "json" (production default): one JSON object per line; "plain" (embedded default).
QTG_LOG_FORMAT = env("QTG_LOG_FORMAT", "plain" if EMBEDDED else "json")
LOGGING = logging_config(fmt=QTG_LOG_FORMAT, level=env("QTG_LOG_LEVEL", "INFO").upper())


# === Audit chain (issue 28, docs/audit.md) ========================================================
# The key of the evidence chain's links is never in the database. The embedded key is published:
# production refuses to start without one of its own.
QTG_AUDIT_KEY = env("QTG_AUDIT_KEY", EMBEDDED_AUDIT_KEY if EMBEDDED else "")
QTG_AUDIT_KEY_ID = env("QTG_AUDIT_KEY_ID", "embedded" if EMBEDDED else "k1")
QTG_AUDIT_KEY_FILE = env("QTG_AUDIT_KEY_FILE", "")
QTG_AUDIT_CHECKPOINT_FILE = env(
    "QTG_AUDIT_CHECKPOINT_FILE", str(VAR_DIR / "audit-checkpoints.jsonl")
)
QTG_AUDIT_CHECKPOINT_SECONDS = float(env("QTG_AUDIT_CHECKPOINT_SECONDS", "300"))
QTG_AUDIT_VERIFY_SECONDS = float(env("QTG_AUDIT_VERIFY_SECONDS", "60"))
QTG_AUDIT_VERIFY_LIMIT = int(env("QTG_AUDIT_VERIFY_LIMIT", "5000"))
# The PostgreSQL role web, workers and beat connect as, when qtg_prestart (migrating as the
# owner) should check that role instead of its own (ops/db_roles.py).
QTG_DB_RUNTIME_ROLE = env("QTG_DB_RUNTIME_ROLE", "")
CELERY_BEAT_SCHEDULE["audit-checkpoint"] = _every(
    QTG_AUDIT_CHECKPOINT_SECONDS, "ops.audit_checkpoint"
)
CELERY_BEAT_SCHEDULE["audit-verify-recent"] = _every(
    QTG_AUDIT_VERIFY_SECONDS, "ops.audit_verify_recent"
)

# === Security (issue 17) ==========================================================================
# Kept in one block. What production refuses to start with is in qtg/profile.py and the README's
# deployment section.
if not EMBEDDED:
    _problems = production_problems(
        secret_key=SECRET_KEY,
        debug=DEBUG,
        audit_key=QTG_AUDIT_KEY or QTG_AUDIT_KEY_FILE,
        # Only the smoke profile (the production smoke test, the API bench) runs the simulated
        # venues; under "production" nothing turns them on.
        sandbox_enabled=QTG_SANDBOX_ENABLED,
        profile=QTG_PROFILE,
        metrics_token=QTG_METRICS_TOKEN,
        metrics_open=QTG_METRICS_OPEN,
    )
    if _problems:
        raise ImproperlyConfigured(
            f"QTG_PROFILE={QTG_PROFILE} refuses to start: " + "; ".join(_problems)
        )

# HTTPS: cookies only over TLS, HSTS, redirect plain HTTP. On by default in production; the
# proxy header is trusted only when named (e.g. "HTTP_X_FORWARDED_PROTO:https"), because a
# proxy that does not overwrite it lets any client claim TLS.
SESSION_COOKIE_SECURE = env_bool("DJANGO_SESSION_COOKIE_SECURE", not EMBEDDED)
CSRF_COOKIE_SECURE = env_bool("DJANGO_CSRF_COOKIE_SECURE", not EMBEDDED)
SESSION_COOKIE_HTTPONLY = True
SECURE_SSL_REDIRECT = env_bool("DJANGO_SECURE_SSL_REDIRECT", not EMBEDDED)
# Load balancers and scrapers probe these over plain HTTP inside the network.
# /metrics follows the HTTPS policy: its token is a secret, and what it shows is.
SECURE_REDIRECT_EXEMPT = [r"^health/(live|ready)?$"]
SECURE_HSTS_SECONDS = int(
    env("DJANGO_SECURE_HSTS_SECONDS", "0" if EMBEDDED else str(365 * 24 * 3600))
)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("DJANGO_SECURE_HSTS_INCLUDE_SUBDOMAINS", not EMBEDDED)
SECURE_HSTS_PRELOAD = env_bool("DJANGO_SECURE_HSTS_PRELOAD", not EMBEDDED)
# Behind a proxy: the origins (scheme://host[:port], comma-separated) a console form may be
# posted from when the proxy's host differs from the web process's, and whether the proxy's
# X-Forwarded-Host names the host (only when the proxy sets it, never passed from clients).
CSRF_TRUSTED_ORIGINS = [
    origin.strip() for origin in env("DJANGO_CSRF_TRUSTED_ORIGINS", "").split(",") if origin.strip()
]
USE_X_FORWARDED_HOST = env_bool("DJANGO_USE_X_FORWARDED_HOST", False)
_proxy_ssl_header = env("DJANGO_SECURE_PROXY_SSL_HEADER", "")
if _proxy_ssl_header:
    _header, _, _value = _proxy_ssl_header.partition(":")
    if not _header or not _value:
        raise ImproperlyConfigured("DJANGO_SECURE_PROXY_SSL_HEADER must be HEADER:value")
    SECURE_PROXY_SSL_HEADER = (_header.strip(), _value.strip())
# An operator session ends after this long (default 8 hours), and when the browser closes.
SESSION_COOKIE_AGE = int(env("DJANGO_SESSION_COOKIE_AGE", str(8 * 3600)))
SESSION_EXPIRE_AT_BROWSER_CLOSE = env_bool("DJANGO_SESSION_EXPIRE_AT_BROWSER_CLOSE", True)

# Venues a movement may name as source or destination (comma-separated; compared in canonical
# form: trimmed, lower case, no trailing dot). The sandbox's exchanges when it is on; production
# names its own, and refuses every movement until it does.
QTG_KNOWN_VENUES = [
    name.strip()
    for name in env(
        "QTG_KNOWN_VENUES",
        "sandbox-exchange-a,sandbox-exchange-b,sandbox-exchange-c" if QTG_SANDBOX_ENABLED else "",
    ).split(",")
    if name.strip()
]
# The longest approval window a movement may ask for: while it waits, its amount is HELD
# against the hardcap.
QTG_MAX_APPROVAL_TTL = timedelta(seconds=int(env("QTG_MAX_APPROVAL_TTL_SECONDS", 24 * 3600)))
# One client (the user creating movements) may have at most this many movements awaiting
# approval, holding at most this share of each hardcap; overridden per user or group by a
# ClientLimit row (admin: Reservations > Client limits).
QTG_CLIENT_MAX_PENDING_COUNT = int(env("QTG_CLIENT_MAX_PENDING_COUNT", "20"))
QTG_CLIENT_MAX_PENDING_SHARE = env("QTG_CLIENT_MAX_PENDING_SHARE", "0.25")
# The API reads at most this many bytes of a request body (413 beyond), and a movement's params
# at most this many bytes of JSON.
QTG_API_MAX_BODY_BYTES = int(env("QTG_API_MAX_BODY_BYTES", 64 * 1024))
QTG_API_MAX_PARAMS_BYTES = int(env("QTG_API_MAX_PARAMS_BYTES", 16 * 1024))

# API tokens (access app): stored as a digest, minted with `manage.py api_token_create` or by a
# superuser in the admin, valid this many days (at most QTG_API_TOKEN_MAX_DAYS).
INSTALLED_APPS.append("access")
# DRF's own tokens (rest_framework.authtoken, kept in clear) are accepted only where this is on:
# the embedded profile, for clients and scripts of the v1.0 API (`manage.py drf_create_token`).
# Production refuses them: mint hashed tokens with `manage.py api_token_create`.
QTG_API_LEGACY_TOKENS = env_bool("QTG_API_LEGACY_TOKENS", EMBEDDED)
QTG_API_TOKEN_LIFETIME = timedelta(days=int(env("QTG_API_TOKEN_DAYS", "90")))
QTG_API_TOKEN_MAX_LIFETIME = timedelta(days=int(env("QTG_API_TOKEN_MAX_DAYS", "365")))
REST_FRAMEWORK["DEFAULT_AUTHENTICATION_CLASSES"] = ["access.authentication.ApiTokenAuthentication"]
# The cache (API throttle counts, among others): QTG_CACHE_URL names a Redis server
# (redis://host:6379/1) that every web process shares, as production should, so a client's
# throttle counts once across processes; unset, each process counts on its own (local memory).
QTG_CACHE_URL = env("QTG_CACHE_URL", "")
if QTG_CACHE_URL:
    if not QTG_CACHE_URL.startswith(("redis://", "rediss://", "unix://")):
        raise ImproperlyConfigured("QTG_CACHE_URL must be a redis://, rediss:// or unix:// URL")
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": QTG_CACHE_URL,
        }
    }
else:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
# Requests per client (the token's user; the address when anonymous), counted in the cache:
# several web processes need a shared cache (CACHES) for one count.
QTG_API_THROTTLE_USER = env("QTG_API_THROTTLE_USER", "600/min")
QTG_API_THROTTLE_ANON = env("QTG_API_THROTTLE_ANON", "60/min")
# Test deliveries a client may ask for (POST /webhooks/{id}/test), on top of the above.
QTG_WEBHOOK_TEST_RATE = env("QTG_WEBHOOK_TEST_RATE", "5/min")

# Console sign-in: django-axes locks an account (per username and address) after
# AXES_FAILURE_LIMIT failures for AXES_COOLOFF_TIME hours; a second factor (django-otp) is
# required of staff holding approve/resolve/force permissions when QTG_OTP_REQUIRED is on
# (access/second_factor.py).
INSTALLED_APPS += ["axes", "django_otp", "django_otp.plugins.otp_totp"]
MIDDLEWARE.insert(
    MIDDLEWARE.index("django.contrib.auth.middleware.AuthenticationMiddleware") + 1,
    "django_otp.middleware.OTPMiddleware",
)
MIDDLEWARE.append("access.second_factor.SecondFactorMiddleware")
MIDDLEWARE.append("axes.middleware.AxesMiddleware")
# Last, so the request metrics see every answer (django-prometheus).
MIDDLEWARE.append("django_prometheus.middleware.PrometheusAfterMiddleware")
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AXES_FAILURE_LIMIT = int(env("AXES_FAILURE_LIMIT", "5"))
AXES_COOLOFF_TIME = timedelta(hours=float(env("AXES_COOLOFF_TIME", "1")))
AXES_VERBOSE = False
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
QTG_OTP_REQUIRED = env_bool("QTG_OTP_REQUIRED", not EMBEDDED)
# A token a superuser mints for someone else is usable only once a second superuser activates
# it (access/services.py); on here, it is usable at once (the embedded default).
QTG_TOKENS_FOR_OTHERS_ALONE = env_bool("QTG_TOKENS_FOR_OTHERS_ALONE", EMBEDDED)
# A user who must use a second factor mints a token with a one-time code at most this old.
QTG_TOKEN_SECOND_FACTOR_MAX_AGE = timedelta(
    seconds=float(env("QTG_TOKEN_SECOND_FACTOR_MAX_AGE_SECONDS", "300"))
)
OTP_TOTP_ISSUER = env("OTP_TOTP_ISSUER", "QTG")

# The API schema (/api/schema/) and docs page (/api/docs/) only for signed-in users (the
# console session or an API token); open on the embedded demo.
QTG_API_DOCS_REQUIRE_LOGIN = env_bool("QTG_API_DOCS_REQUIRE_LOGIN", not EMBEDDED)

# DEBUG pages and error reports mask the password inside DATABASE_URL, CELERY_BROKER_URL and
# any other URL they show (qtg/reporting.py).
DEFAULT_EXCEPTION_REPORTER_FILTER = "qtg.reporting.CredentialMaskingFilter"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {
        "NAME": "django.contrib.auth.password_validation.MinimumLengthValidator",
        "OPTIONS": {"min_length": 12},
    },
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

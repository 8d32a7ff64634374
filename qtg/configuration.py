"""Every environment variable QTG reads, declared once: name, type, default per profile
(embedded / production), section, one line of doc, and whether setting it weakens security.

``docs/configuration.md`` is generated from this table (``python -m qtg.configuration >
docs/configuration.md``); ``tests/architecture/test_configuration.py`` fails when the file is
not current, when the code reads a variable this table does not declare, or when the table
declares one nothing reads. ``qtg/settings.py`` reads the environment only through ``env``,
which refuses a variable not declared here (it parses each value where it is used).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Var:
    name: str
    type: str
    embedded: str
    production: str
    section: str
    doc: str
    weakens_security: bool = False


SAME = object()


def v(name, type_, embedded, production=SAME, *, section, doc, weakens=False) -> Var:
    return Var(
        name,
        type_,
        embedded,
        embedded if production is SAME else production,
        section,
        doc,
        weakens,
    )


PROFILE, DATABASE, CELERY, EXECUTION, API, SECURITY, OPS, VENUES, WEBHOOKS, NOTIFY, TOOLS = (
    "Profile and paths",
    "Database",
    "Celery and the scheduler",
    "Execution",
    "API and clients",
    "Security",
    "Operability",
    "Venues",
    "Webhooks",
    "Notifications",
    "Tests and tools",
)

VARIABLES: list[Var] = [
    # --- profile and paths
    v(
        "QTG_PROFILE",
        "embedded / production / smoke",
        "embedded (make sets it)",
        "production",
        section=PROFILE,
        doc="Which profile; anything else, unset included, stops the start (smoke: production "
        "with the sandbox venues, for the smoke test and the bench).",
    ),
    v(
        "DJANGO_SETTINGS_MODULE",
        "module",
        "qtg.settings",
        section=PROFILE,
        doc="Django's settings module (set by manage.py, wsgi, asgi and the Celery app).",
    ),
    v(
        "QTG_VAR_DIR",
        "path",
        "./var",
        section=PROFILE,
        doc="SQLite, embedded broker, beat schedule, static files, metrics, gunicorn's socket.",
    ),
    v(
        "QTG_ROUTE_TEMPLATE_DIR",
        "path",
        "movements/route_templates",
        section=PROFILE,
        doc="Where the route templates are read from.",
    ),
    v(
        "PATH",
        "path list",
        "(inherited)",
        section=PROFILE,
        doc="make run puts the venv's bin first for the processes it starts.",
    ),
    # --- database
    v(
        "DATABASE_URL",
        "URL",
        "(unset: SQLite in the var dir)",
        "postgres://...",
        section=DATABASE,
        doc="The database; PostgreSQL in production.",
    ),
    v(
        "QTG_DB_CONN_MAX_AGE",
        "seconds",
        "60",
        section=DATABASE,
        doc="How long a process keeps its PostgreSQL connection (0: one per request or task).",
    ),
    v(
        "QTG_DB_CONNECT_TIMEOUT",
        "seconds",
        "5",
        section=DATABASE,
        doc="How long a PostgreSQL connection attempt may take before it fails (at least 2).",
    ),
    v(
        "QTG_SQLITE_PATH",
        "path",
        "$QTG_VAR_DIR/qtg.sqlite3",
        section=DATABASE,
        doc="The SQLite file when DATABASE_URL is unset.",
    ),
    v(
        "QTG_SQLITE_TEST_PATH",
        "path",
        "$QTG_VAR_DIR/test.sqlite3",
        section=DATABASE,
        doc="The suite's SQLite file (pytest-xdist adds _gw<n>).",
    ),
    # --- celery and the scheduler
    v(
        "CELERY_BROKER_URL",
        "URL",
        "filesystem:// (var/broker)",
        "redis://... or amqp://...",
        section=CELERY,
        doc="The broker; the embedded one is qtg/broker.py's atomic filesystem transport.",
    ),
    v(
        "QTG_CELERY_QUEUE",
        "name",
        "qtg",
        section=CELERY,
        doc="The deployment's queue; <name>.venues and <name>.webhooks beside it (qtg/queues.py).",
    ),
    v(
        "CELERY_TASK_ALWAYS_EAGER",
        "bool",
        "0",
        section=CELERY,
        doc="Run tasks in the caller (tests and scripts only).",
        weakens=False,
    ),
    v(
        "QTG_TICK_SECONDS",
        "seconds",
        "2",
        section=CELERY,
        doc="Beat interval of the dispatch and observe sweeps (others are multiples).",
    ),
    v(
        "QTG_GAUGES_SECONDS",
        "seconds",
        "15",
        section=CELERY,
        doc="How often the scheduler recomputes the gauges /metrics serves (a scrape reads "
        "the stored ones).",
    ),
    v(
        "QTG_SWEEP_EXPIRES_MIN_SECONDS",
        "seconds",
        "5",
        section=CELERY,
        doc="A sweep message expires after three of its intervals, never sooner than this: "
        "a busy worker discards a backlog of stale sweeps instead of running each one.",
    ),
    v(
        "QTG_SWEEP_BACKLOG",
        "count",
        "4",
        section=CELERY,
        doc="While a queue holds this many messages, beat sends no sweep whose last message "
        "may still be waiting in it: a worker that falls behind finds one of each sweep, not "
        "a backlog of copies in which the rare ones (recovery) expire unread.",
    ),
    v(
        "QTG_EXPIRE_APPROVALS_SECONDS",
        "seconds",
        "30",
        section=CELERY,
        doc="Interval of the sweep that expires approvals.",
    ),
    v(
        "QTG_SCHEDULER_LEASE_SECONDS",
        "seconds",
        "max(6, 3 ticks)",
        section=CELERY,
        doc="A stand-by beat takes over when the leader has not renewed its lease this long.",
    ),
    # --- execution
    v(
        "QTG_ROW_WRITER",
        "auto / orm / postgresql",
        "auto",
        section=EXECUTION,
        doc="How rows are written.",
    ),
    v("QTG_LEASE_SECONDS", "seconds", "60", section=EXECUTION, doc="A claimed node's lease."),
    v(
        "QTG_REAP_SECONDS",
        "seconds",
        "min(5 ticks, a quarter lease)",
        section=EXECUTION,
        doc="How often each worker process reaps expired leases (from a thread of its own).",
    ),
    v(
        "QTG_OBSERVE_POLL_SECONDS",
        "seconds",
        "the tick",
        section=EXECUTION,
        doc="How often a submitted node is observed.",
    ),
    v("QTG_RETRY_BASE_SECONDS", "seconds", "2", section=EXECUTION, doc="First retry backoff."),
    v("QTG_RETRY_MAX_SECONDS", "seconds", "300", section=EXECUTION, doc="Longest retry backoff."),
    v(
        "QTG_MAX_DISPATCHES",
        "count",
        "10",
        section=EXECUTION,
        doc="Venue errors of a node before it fails (lost claims and venue waits never count).",
    ),
    v(
        "QTG_WAIT_ATTENTION_SECONDS",
        "seconds",
        "3600",
        section=EXECUTION,
        doc="A venue keeping a node waiting, or workers losing it before its submit, this "
        "long asks a person to look.",
    ),
    v("QTG_DISPATCH_BATCH", "count", "50", section=EXECUTION, doc="Nodes one sweep handles."),
    v("QTG_CLAIM_BATCH", "count", "50", section=EXECUTION, doc="Most nodes one claim locks."),
    v(
        "QTG_CLAIM_BATCH_MIN",
        "count",
        "8",
        section=EXECUTION,
        doc="First claim size of a sweep (doubles while claims come back full).",
    ),
    v(
        "QTG_CLAIM_FIRST_ACTIONS",
        "count",
        "1",
        section=EXECUTION,
        doc="Most action nodes a sweep's first claim takes (0: no limit); the tick fans out "
        "a sweep for each further one due.",
    ),
    v(
        "QTG_STUCK_AFTER_SECONDS",
        "seconds",
        "1800",
        section=EXECUTION,
        doc="A node waiting longer makes its movement need attention.",
    ),
    v(
        "QTG_RESULT_WRITE_SECONDS",
        "seconds",
        "1",
        section=EXECUTION,
        doc="Longest wait before a batch's results are written.",
    ),
    v(
        "QTG_RESULT_WRITE_AT_ONCE_BELOW",
        "count",
        "2",
        section=EXECUTION,
        doc="A claimed batch of at most this many nodes writes each result as it comes.",
    ),
    v(
        "QTG_SWEEP_FANOUT",
        "count",
        "4",
        section=EXECUTION,
        doc="Sweeps fanned out to other workers.",
    ),
    v(
        "QTG_DEFAULT_APPROVAL_TTL_SECONDS",
        "seconds",
        "86400",
        section=EXECUTION,
        doc="Approval window of a movement that asks for none.",
    ),
    v(
        "QTG_MAX_APPROVAL_TTL_SECONDS",
        "seconds",
        "86400",
        section=EXECUTION,
        doc="Longest approval window a movement may ask for.",
    ),
    v(
        "QTG_IDEMPOTENCY_KEY_RETENTION_DAYS",
        "days",
        "7",
        section=EXECUTION,
        doc="How long an Idempotency-Key is remembered.",
    ),
    # --- API and clients
    v("QTG_API_MAX_BODY_BYTES", "bytes", "65536", section=API, doc="Largest API request body."),
    v(
        "QTG_API_MAX_PARAMS_BYTES",
        "bytes",
        "16384",
        section=API,
        doc="Largest params of a movement (JSON).",
    ),
    v("QTG_API_THROTTLE_USER", "rate", "600/min", section=API, doc="Requests per API client."),
    v(
        "QTG_API_THROTTLE_ANON",
        "rate",
        "60/min",
        section=API,
        doc="Requests per anonymous address.",
    ),
    v(
        "QTG_CACHE_URL",
        "redis URL",
        "(unset: per-process memory)",
        "redis://...",
        section=API,
        doc="The shared cache (throttle counts across web processes).",
    ),
    v("QTG_API_TOKEN_DAYS", "days", "90", section=API, doc="Lifetime of a minted API token."),
    v("QTG_API_TOKEN_MAX_DAYS", "days", "365", section=API, doc="Longest API token lifetime."),
    v(
        "QTG_API_LEGACY_TOKENS",
        "bool",
        "1",
        "0",
        section=API,
        doc="Accept DRF's clear-text tokens (v1.0 clients).",
        weakens=True,
    ),
    v(
        "QTG_API_DOCS_REQUIRE_LOGIN",
        "bool",
        "0",
        "1",
        section=API,
        doc="The API schema and docs only for signed-in users (off weakens).",
        weakens=True,
    ),
    v(
        "QTG_CLIENT_MAX_PENDING_COUNT",
        "count",
        "20",
        section=API,
        doc="Movements one client may have awaiting approval.",
    ),
    v(
        "QTG_CLIENT_MAX_PENDING_SHARE",
        "fraction",
        "0.25",
        section=API,
        doc="Share of a hardcap one client's pending movements may hold.",
    ),
    # --- security
    v(
        "DJANGO_SECRET_KEY",
        "secret",
        "(published embedded key)",
        "(required)",
        section=SECURITY,
        doc="Django's signing key; production refuses a weak or published one.",
    ),
    v(
        "DJANGO_DEBUG",
        "bool",
        "1",
        "0 (refused on)",
        section=SECURITY,
        doc="Debug pages (show settings and code).",
        weakens=True,
    ),
    v(
        "DJANGO_ALLOWED_HOSTS",
        "list",
        "localhost,127.0.0.1,testserver",
        "localhost,127.0.0.1",
        section=SECURITY,
        doc="Host names the web answers to.",
    ),
    v(
        "DJANGO_CSRF_TRUSTED_ORIGINS",
        "list",
        "(none)",
        section=SECURITY,
        doc="Origins a console form may be posted from behind a proxy.",
    ),
    v(
        "DJANGO_USE_X_FORWARDED_HOST",
        "bool",
        "0",
        section=SECURITY,
        doc="Take the host from the proxy's X-Forwarded-Host.",
        weakens=True,
    ),
    v(
        "DJANGO_SECURE_PROXY_SSL_HEADER",
        "HEADER:value",
        "(none)",
        section=SECURITY,
        doc="The proxy header that says the request came over TLS.",
        weakens=True,
    ),
    v(
        "DJANGO_SESSION_COOKIE_SECURE",
        "bool",
        "0",
        "1",
        section=SECURITY,
        doc="Session cookie over TLS only (off weakens).",
        weakens=True,
    ),
    v(
        "DJANGO_CSRF_COOKIE_SECURE",
        "bool",
        "0",
        "1",
        section=SECURITY,
        doc="CSRF cookie over TLS only (off weakens).",
        weakens=True,
    ),
    v(
        "DJANGO_SECURE_SSL_REDIRECT",
        "bool",
        "0",
        "1",
        section=SECURITY,
        doc="Redirect plain HTTP to HTTPS (off weakens).",
        weakens=True,
    ),
    v(
        "DJANGO_SECURE_HSTS_SECONDS",
        "seconds",
        "0",
        "31536000",
        section=SECURITY,
        doc="HSTS max-age (0 weakens).",
        weakens=True,
    ),
    v(
        "DJANGO_SECURE_HSTS_INCLUDE_SUBDOMAINS",
        "bool",
        "0",
        "1",
        section=SECURITY,
        doc="HSTS for subdomains.",
    ),
    v("DJANGO_SECURE_HSTS_PRELOAD", "bool", "0", "1", section=SECURITY, doc="HSTS preload."),
    v(
        "DJANGO_SESSION_COOKIE_AGE",
        "seconds",
        "28800",
        section=SECURITY,
        doc="Longest console session.",
    ),
    v(
        "DJANGO_SESSION_EXPIRE_AT_BROWSER_CLOSE",
        "bool",
        "1",
        section=SECURITY,
        doc="A console session ends with the browser (off weakens).",
        weakens=True,
    ),
    v(
        "AXES_FAILURE_LIMIT",
        "count",
        "5",
        section=SECURITY,
        doc="Failed sign-ins before a lockout.",
    ),
    v("AXES_COOLOFF_TIME", "hours", "1", section=SECURITY, doc="How long a lockout lasts."),
    v(
        "QTG_OTP_REQUIRED",
        "bool",
        "0",
        "1",
        section=SECURITY,
        doc="A second factor for staff who may approve, resolve or force (off weakens).",
        weakens=True,
    ),
    v(
        "OTP_TOTP_ISSUER",
        "text",
        "QTG",
        section=SECURITY,
        doc="Issuer shown in authenticator apps.",
    ),
    v(
        "QTG_ADDRESS_BOOK_ENFORCED",
        "bool",
        "0",
        "1",
        section=SECURITY,
        doc="Destinations must be vetted address book entries (off weakens).",
        weakens=True,
    ),
    v(
        "QTG_ADDRESS_COOLDOWN_SECONDS",
        "seconds",
        "0",
        "86400",
        section=SECURITY,
        doc="A new address book entry is usable after this long (0 weakens).",
        weakens=True,
    ),
    v(
        "QTG_TWO_PERSON_OVERRIDES",
        "bool",
        "0",
        "1",
        section=SECURITY,
        doc="Force-complete, force-fail and the like need a second supervisor (off weakens).",
        weakens=True,
    ),
    v(
        "QTG_OVERRIDE_PROPOSAL_TTL_SECONDS",
        "seconds",
        "3600",
        section=SECURITY,
        doc="How long a two-person proposal waits for its confirmation.",
    ),
    v(
        "QTG_METRICS_TOKEN",
        "secret",
        "(none)",
        "(required unless QTG_METRICS_OPEN)",
        section=SECURITY,
        doc="Bearer token /metrics requires; production refuses to start without one.",
    ),
    v(
        "QTG_METRICS_OPEN",
        "bool",
        "1",
        "0",
        section=SECURITY,
        doc="/metrics without a token, to anyone (on weakens: amounts in flight are public).",
        weakens=True,
    ),
    v(
        "QTG_TOKEN_SECOND_FACTOR_MAX_AGE_SECONDS",
        "seconds",
        "300",
        section=SECURITY,
        doc="How old the one-time code of a second-factor user minting a token may be.",
    ),
    v(
        "QTG_TOKENS_FOR_OTHERS_ALONE",
        "bool",
        "1",
        "0",
        section=SECURITY,
        doc="A token minted for someone else is usable without a second superuser (on weakens).",
        weakens=True,
    ),
    v(
        "QTG_AUDIT_KEY",
        "secret",
        "(published embedded key)",
        "(required, or QTG_AUDIT_KEY_FILE)",
        section=SECURITY,
        doc="The audit chain's HMAC key (never in the database); docs/audit.md.",
    ),
    v(
        "QTG_AUDIT_KEY_ID",
        "text",
        "embedded",
        "k1",
        section=SECURITY,
        doc="The id stored beside every link signed with QTG_AUDIT_KEY (rotation).",
    ),
    v(
        "QTG_AUDIT_KEY_FILE",
        "path",
        "(none)",
        section=SECURITY,
        doc="File of '<key id> <secret>' lines: the first signs, all verify (rotation).",
    ),
    v(
        "QTG_AUDIT_CHECKPOINT_FILE",
        "path",
        "$QTG_VAR_DIR/audit-checkpoints.jsonl",
        section=SECURITY,
        doc="Append-only file of signed audit checkpoints (keep it off the database host).",
    ),
    v(
        "QTG_AUDIT_CHECKPOINT_SECONDS",
        "seconds",
        "300",
        section=SECURITY,
        doc="How often beat writes a signed audit checkpoint.",
    ),
    v(
        "QTG_AUDIT_VERIFY_SECONDS",
        "seconds",
        "60",
        section=SECURITY,
        doc="How often beat verifies the newest audit rows (health and metric).",
    ),
    v(
        "QTG_DB_RUNTIME_ROLE",
        "role name",
        "(none: the connection's own role)",
        section=SECURITY,
        doc="PostgreSQL role the app runs as; qtg_prestart warns if it can rewrite evidence.",
    ),
    v(
        "QTG_AUDIT_VERIFY_LIMIT",
        "count",
        "5000",
        section=SECURITY,
        doc="Newest rows per evidence table one beat verification reads at most.",
    ),
    # --- operability
    v(
        "PROMETHEUS_MULTIPROC_DIR",
        "path",
        "$QTG_VAR_DIR/metrics",
        section=OPS,
        doc="Where the processes of a machine meet for /metrics.",
    ),
    v("QTG_LOG_FORMAT", "plain / json", "plain", "json", section=OPS, doc="Log line format."),
    v("QTG_LOG_LEVEL", "level", "INFO", section=OPS, doc="Log level."),
    v(
        "QTG_HEALTH_BUDGET_SECONDS",
        "seconds",
        "0.8",
        section=OPS,
        doc="/health/ready's checks get this long (the whole answer within 1 s); a check "
        "still running then fails.",
    ),
    v(
        "QTG_HEALTH_MAX_SWEEP_AGE_SECONDS",
        "seconds",
        "max(60, 15 ticks)",
        section=OPS,
        doc="/health/ready fails when no sweep finished for this long.",
    ),
    v(
        "QTG_HEALTH_MAX_WORKER_AGE_SECONDS",
        "seconds",
        "30",
        section=OPS,
        doc="A worker whose heartbeat is older is not counted.",
    ),
    v(
        "QTG_HEARTBEAT_WRITE_SECONDS",
        "seconds",
        "5",
        section=OPS,
        doc="How often a worker stamps its heartbeat (and at most how often a sweep does).",
    ),
    # --- venues
    v(
        "QTG_VENUES",
        "off / local / live",
        "off",
        "live",
        section=VENUES,
        doc="Sandbox, local stand-ins, or the real venues.",
    ),
    v("QTG_EXECUTORS", "JSON", "{}", section=VENUES, doc="Which app serves an executor name."),
    v(
        "QTG_CHAINS_CONFIG",
        "path",
        "venues/chains.yaml",
        section=VENUES,
        doc="The reviewed chain configuration.",
    ),
    v(
        "QTG_EVM_MAX_IN_FLIGHT",
        "count",
        "64",
        section=VENUES,
        doc="Most nonces of one EVM sender allocated and not yet mined (its transfers are "
        "sent without waiting for each other's receipts up to it; geth queues 64 per account).",
    ),
    v(
        "QTG_IRIS_REQUESTS_PER_SECOND",
        "number",
        "35",
        section=VENUES,
        doc="Circle's attestation API limit per caller; all workers together send at most 6/7 "
        "of it in any second (one shared bucket).",
    ),
    v(
        "QTG_EXCHANGES_CONFIG",
        "path",
        "venues/exchanges.yaml",
        section=VENUES,
        doc="The reviewed exchange configuration.",
    ),
    v(
        "QTG_KNOWN_VENUES",
        "list",
        "the sandbox's exchanges",
        "(none)",
        section=VENUES,
        doc="Venues a movement may name besides configured accounts.",
    ),
    v(
        "QTG_SANDBOX_ENABLED",
        "bool",
        "1",
        "0 (refused on; smoke profile only)",
        section=VENUES,
        doc="The simulated venues.",
        weakens=True,
    ),
    v(
        "QTG_SANDBOX_TIME_SCALE",
        "factor",
        "1",
        section=VENUES,
        doc="Speeds the simulated chains up (tests).",
    ),
    v(
        "QTG_SANDBOX_REQUEST_VALIDITY_SECONDS",
        "seconds",
        "30",
        section=VENUES,
        doc="How long the simulated exchange honours a fenced request.",
    ),
    # --- webhooks
    v(
        "QTG_CALLBACKS_ALLOW_PRIVATE_TARGETS",
        "bool",
        "1",
        "0",
        section=WEBHOOKS,
        doc="Webhooks to private and loopback addresses (on weakens).",
        weakens=True,
    ),
    v("QTG_CALLBACKS_MAX_ATTEMPTS", "count", "10", section=WEBHOOKS, doc="Attempts before DEAD."),
    v(
        "QTG_CALLBACKS_BACKOFF_SECONDS",
        "seconds",
        "30",
        section=WEBHOOKS,
        doc="First retry backoff.",
    ),
    v(
        "QTG_CALLBACKS_BACKOFF_MAX_SECONDS",
        "seconds",
        "21600",
        section=WEBHOOKS,
        doc="Longest retry backoff.",
    ),
    v(
        "QTG_CALLBACKS_TIMEOUT_SECONDS",
        "seconds",
        "5",
        section=WEBHOOKS,
        doc="Per-attempt timeout.",
    ),
    v(
        "QTG_CALLBACKS_DEADLINE_SECONDS",
        "seconds",
        "15",
        section=WEBHOOKS,
        doc="A delivery attempt ends by this deadline, however slowly the receiver answers.",
    ),
    v(
        "QTG_WEBHOOK_TEST_RATE",
        "rate",
        "5/min",
        section=WEBHOOKS,
        doc="Test deliveries a client may ask for (POST /webhooks/{id}/test).",
    ),
    v(
        "QTG_CALLBACKS_REQUEUE_AFTER_SECONDS",
        "seconds",
        "120",
        section=WEBHOOKS,
        doc="A due delivery queued longer ago is queued again.",
    ),
    v(
        "QTG_WEBHOOK_SECRET_OVERLAP_SECONDS",
        "seconds",
        "86400",
        section=WEBHOOKS,
        doc="How long a rotated secret keeps signing.",
    ),
    # --- notifications
    v(
        "QTG_EMAIL_BACKEND",
        "Django email backend",
        "django.core.mail.backends.console.EmailBackend",
        "django.core.mail.backends.smtp.EmailBackend",
        section=NOTIFY,
        doc="How notification emails leave: printed by the worker (embedded), SMTP (production).",
    ),
    v("EMAIL_HOST", "host", "localhost", section=NOTIFY, doc="The SMTP server."),
    v("EMAIL_PORT", "port", "25", section=NOTIFY, doc="The SMTP server's port."),
    v("EMAIL_HOST_USER", "name", "(empty)", section=NOTIFY, doc="SMTP login, if it needs one."),
    v("EMAIL_HOST_PASSWORD", "secret", "(empty)", section=NOTIFY, doc="SMTP password."),
    v("EMAIL_USE_TLS", "bool", "0", section=NOTIFY, doc="STARTTLS to the SMTP server."),
    v(
        "DEFAULT_FROM_EMAIL",
        "address",
        "QTG <qtg@localhost>",
        section=NOTIFY,
        doc="The sender of notification emails.",
    ),
    v(
        "QTG_CONSOLE_URL",
        "URL",
        "http://127.0.0.1:8000",
        "(empty: links without a host)",
        section=NOTIFY,
        doc="The console's address, for the links in notifications.",
    ),
    v(
        "QTG_NOTIFY_CHAT_WEBHOOK_URL",
        "URL",
        "(unset: no chat)",
        section=NOTIFY,
        doc='A chat incoming webhook each notification is POSTed to as JSON {"text", ...}.',
    ),
    v(
        "QTG_NOTIFY_TIMEOUT_SECONDS",
        "seconds",
        "10",
        section=NOTIFY,
        doc="Per-attempt timeout of an email or chat post.",
    ),
    v(
        "QTG_NOTIFY_MAX_ATTEMPTS",
        "count",
        "8",
        section=NOTIFY,
        doc="Attempts before a notification is DEAD.",
    ),
    v(
        "QTG_NOTIFY_BACKOFF_SECONDS",
        "seconds",
        "30",
        section=NOTIFY,
        doc="First retry backoff (doubling).",
    ),
    v(
        "QTG_NOTIFY_BACKOFF_MAX_SECONDS",
        "seconds",
        "3600",
        section=NOTIFY,
        doc="Longest retry backoff.",
    ),
    v(
        "QTG_NOTIFY_REQUEUE_AFTER_SECONDS",
        "seconds",
        "120",
        section=NOTIFY,
        doc="A due notification queued longer ago is queued again.",
    ),
    v(
        "QTG_NOTIFY_DIGEST_SECONDS",
        "seconds",
        "3600",
        section=NOTIFY,
        doc="How often each person's digest email is sent.",
    ),
    # --- tests and tools
    v(
        "QTG_EVM_CRASH_AT",
        "point",
        "(none)",
        "(ignored with QTG_VENUES=live)",
        section=TOOLS,
        doc="A worker SIGKILLs itself at this point of an EVM send (crash tests).",
    ),
    v(
        "QTG_EVM_PAUSE_AT",
        "point",
        "(none)",
        "(ignored with QTG_VENUES=live)",
        section=TOOLS,
        doc="A worker stops itself (SIGSTOP) at this point of an EVM send (pause tests).",
    ),
    v(
        "QTG_URL",
        "URL",
        "http://127.0.0.1:8000",
        section=TOOLS,
        doc="docs/integrator_example.py: the QTG to call.",
    ),
    v(
        "QTG_TOKEN",
        "secret",
        "(required)",
        section=TOOLS,
        doc="docs/integrator_example.py: its API token.",
    ),
    v(
        "QTG_WEBHOOK_SECRET",
        "secret",
        "(required)",
        section=TOOLS,
        doc="docs/integrator_example.py: the webhook secret it verifies with.",
    ),
]

BY_NAME = {var.name: var for var in VARIABLES}


class UndeclaredVariable(LookupError):
    """Settings asked for an environment variable this table does not declare."""


def env(name: str, default: Any = None) -> Any:
    """The environment's value of ``name`` (``default`` when unset): the one way settings read
    the environment, and only a variable declared above (documented, typed, with its
    profiles' defaults) may be read."""
    if name not in BY_NAME:
        raise UndeclaredVariable(
            f"{name} is not declared in qtg/configuration.py: declare it (name, type, "
            f"defaults, section, doc) before settings read it"
        )
    return os.environ.get(name, default)


def render_markdown() -> str:
    lines = [
        "# Configuration",
        "",
        "Every environment variable QTG reads. Generated from `qtg/configuration.py`",
        "(`python -m qtg.configuration > docs/configuration.md`); the suite fails when this file",
        "is stale or the code reads a variable the table does not declare.",
        "",
        "A ⚠ marks a setting whose non-default value weakens security.",
    ]
    for section in dict.fromkeys(var.section for var in VARIABLES):
        lines += [
            "",
            f"## {section}",
            "",
            "| variable | type | embedded | production | |",
            "|---|---|---|---|---|",
        ]
        for var in (x for x in VARIABLES if x.section == section):
            mark = "⚠ " if var.weakens_security else ""
            lines.append(
                f"| `{var.name}` | {var.type} | {var.embedded} | {var.production} | "
                f"{mark}{var.doc} |"
            )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(render_markdown(), end="")

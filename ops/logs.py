"""Logging: structlog in front of the standard library, so Django's, Celery's and our own
lines go through one pipeline. ``json`` (production) writes one JSON object per line with
whatever is bound — movement id, node key, attempt, actor, the API request id; ``plain``
(the embedded default) writes ``LEVEL logger: message``.

Celery logs every task it receives and finishes, and beat every task it sends, at INFO: for
the periodic sweeps (every 2 seconds) those lines are demoted to DEBUG.
"""

import logging
from typing import Any

import structlog

# Loggers whose INFO lines describe routine task traffic, not events.
ROUTINE_LOGGERS = ("celery.app.trace", "celery.worker.strategy", "celery.beat")
# A worker starting and stopping ("... ready.") is shown at any level: supervisors and
# operators wait for it.
LIFECYCLE_LOGGERS = ("celery.apps.worker",)
# Django logs a request it refuses for what the client sent (a Host header the deployment
# does not answer to: any scanner sends one) at ERROR, with a traceback's weight; the client got
# its 400 and nothing of ours failed: a WARNING, so an alert on ERROR lines means a fault.
CLIENT_REFUSAL_LOGGERS = ("django.security.DisallowedHost",)


class DemoteRoutine(logging.Filter):
    """INFO lines of ``ROUTINE_LOGGERS`` become DEBUG, shown only at ``threshold`` DEBUG;
    those of ``LIFECYCLE_LOGGERS`` are always shown; ERROR lines of ``CLIENT_REFUSAL_LOGGERS``
    become WARNING."""

    def __init__(self, threshold: str = "INFO") -> None:
        super().__init__()
        self.threshold = logging.getLevelName(threshold.upper())

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno == logging.INFO and record.name.startswith(ROUTINE_LOGGERS):
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        elif record.levelno == logging.ERROR and record.name.startswith(CLIENT_REFUSAL_LOGGERS):
            record.levelno, record.levelname = logging.WARNING, "WARNING"
        if record.levelno >= logging.INFO and record.name.startswith(LIFECYCLE_LOGGERS):
            return True
        return record.levelno >= self.threshold


class OneLinePerRequest(logging.Filter):
    """django-structlog logs ``request_started`` and ``request_finished`` for every request;
    the second carries everything (request id, user, status): keep only it."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (isinstance(record.msg, dict) and record.msg.get("event") == "request_started")


def _plain(_logger: Any, _method: str, event: dict[str, Any]) -> str:
    line = f"{event.get('level', '').upper():<7} {event.get('logger', '')}: {event.get('event')}"
    exception = event.get("exception")
    return f"{line}\n{exception}" if exception else line


SHARED = [
    structlog.contextvars.merge_contextvars,
    structlog.stdlib.add_log_level,
    structlog.stdlib.add_logger_name,
    structlog.processors.TimeStamper(fmt="iso", utc=True, key="timestamp"),
]


def logging_config(*, fmt: str, level: str) -> dict[str, Any]:
    """The ``LOGGING`` dict, with structlog configured to hand its events to it."""
    if fmt == "json":
        # Python warnings (Celery's superuser warning, deprecations) as log lines too.
        logging.captureWarnings(True)
    structlog.configure(
        processors=[
            structlog.stdlib.filter_by_level,
            *SHARED,
            structlog.stdlib.PositionalArgumentsFormatter(),
            structlog.processors.StackInfoRenderer(),
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )
    renderer = structlog.processors.JSONRenderer(default=str) if fmt == "json" else _plain
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {
            "qtg": {
                "()": structlog.stdlib.ProcessorFormatter,
                "processors": [
                    structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                    structlog.processors.format_exc_info,
                    renderer,
                ],
                "foreign_pre_chain": [*SHARED, structlog.stdlib.ExtraAdder()],
            }
        },
        "filters": {
            "routine": {"()": DemoteRoutine, "threshold": level},
            "one_line_per_request": {"()": OneLinePerRequest},
        },
        "handlers": {
            "console": {
                "class": "logging.StreamHandler",
                "formatter": "qtg",
                "filters": ["routine", "one_line_per_request"],
            }
        },
        "root": {"handlers": ["console"], "level": level},
        "loggers": {
            # httpx logs every webhook POST at INFO; delivery outcomes are logged by callbacks.
            "httpx": {"level": "WARNING"},
            # Warns at every connection to the embedded broker that it has no hostname.
            "kombu.connection": {"level": "ERROR"},
            # A failing check is reported by /health/ itself; no traceback per probe.
            "health_check": {"level": "ERROR"},
            # Django's own console handler (DEBUG only) would print its lines a second time.
            "django": {"handlers": [], "level": "INFO", "propagate": True},
            # One line per HTTP request (with its request id) in production only.
            "django_structlog": {"level": "INFO" if fmt == "json" else "WARNING"},
            # ... and not a second one for a 4xx (django.request's "Not Found: /x"); server
            # errors keep their traceback line.
            "django.request": {"level": "ERROR" if fmt == "json" else "WARNING"},
            **{name: {"level": "DEBUG"} for name in ROUTINE_LOGGERS},
            **{name: {"level": "INFO"} for name in LIFECYCLE_LOGGERS},
        },
    }

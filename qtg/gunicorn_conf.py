"""gunicorn's settings file (the Procfile's web line: ``--config python:qtg.gunicorn_conf``).

In production (``QTG_LOG_FORMAT=json``) gunicorn's own lines (start, workers booting, errors)
go through QTG's logging pipeline (ops/logs.py), one JSON object per line like every other
process's. Its access log stays off: each request is logged once, by the web app itself
(django-structlog's ``request_finished``, with its request id, user and status). With the
plain format (``make run``) gunicorn keeps its own format.
"""

import os
from pathlib import Path

from ops.logs import logging_config

# The control socket (``gunicornc``) in this deployment's var directory, not gunicorn's default
# ``~/.gunicorn/gunicorn.ctl`` that every gunicorn of the user shares (the Procfile names it
# too). QTG_VAR_DIR's default is the settings' (qtg/settings.py: the checkout's var/).
_var_dir = Path(os.environ.get("QTG_VAR_DIR") or Path(__file__).resolve().parents[1] / "var")
_var_dir.mkdir(parents=True, exist_ok=True)
control_socket = str(_var_dir / "gunicorn.ctl")

_profile = os.environ.get("QTG_PROFILE", "")
_fmt = os.environ.get("QTG_LOG_FORMAT", "plain" if _profile == "embedded" else "json")

if _fmt == "json":
    logconfig_dict = logging_config(fmt="json", level=os.environ.get("QTG_LOG_LEVEL", "INFO"))
    logconfig_dict["loggers"].update(
        {
            "gunicorn.error": {"level": "INFO", "handlers": ["console"], "propagate": False},
            "gunicorn.access": {"level": "WARNING", "handlers": [], "propagate": False},
        }
    )

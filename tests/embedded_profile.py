"""pytest plugin (``-p tests.embedded_profile`` in pyproject.toml): a bare ``python -m pytest``
runs the suite on the embedded profile, as ``make test`` does.

Loaded before pytest-django reads the settings, which refuse to start without a profile.

Under pytest-xdist (``make test`` runs ``-n``) each worker process gets a var directory of its
own, so nothing the settings put under ``QTG_VAR_DIR`` is shared between workers: the SQLite
test database, the embedded broker's folders, the metrics directory, the beat schedule, static
files. (pytest-django already gives each worker its own test database name, ``_gw0`` ...,
on SQLite and PostgreSQL alike; stand-ins and servers bind free ports.)
"""

import os
from pathlib import Path

os.environ.setdefault("QTG_PROFILE", "embedded")

_worker = os.environ.get("PYTEST_XDIST_WORKER")
if _worker:
    _base = Path(os.environ.get("QTG_VAR_DIR") or Path(__file__).resolve().parents[1] / "var")
    os.environ["QTG_VAR_DIR"] = str(_base / f"xdist-{_worker}")
    # Derived from the var directory by the settings unless given: then per worker too.
    for _name in ("PROMETHEUS_MULTIPROC_DIR", "QTG_SQLITE_PATH", "QTG_SQLITE_TEST_PATH"):
        if os.environ.get(_name):
            os.environ[_name] = f"{os.environ[_name]}-{_worker}"

"""The production profile as it is started (``qtg_prestart``, then the Procfile through honcho)
with DEBUG off: gunicorn serves the admin's CSS, /health/ is 200 with everything up and 503
with the broker or the database unreachable, /metrics carries its names behind the token, and
a movement's log lines are JSON carrying its id. SQLite and the embedded broker in a
temporary directory: what is under test is the web profile, not the engines."""

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import uuid
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import httpx
import pytest

from tests.ops.test_metrics import NAMES

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "smoke-" + uuid.uuid4().hex


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def production_env(tmp: Path, **extra: str) -> dict[str, str]:
    env = {
        key: value
        for key, value in os.environ.items()
        # The test process's engines and metrics directory are not this deployment's.
        if key not in {"DATABASE_URL", "CELERY_BROKER_URL", "PROMETHEUS_MULTIPROC_DIR"}
        and not key.startswith("QTG_")
    }
    env.update(
        QTG_PROFILE="smoke",
        DJANGO_SECRET_KEY="smoke-" + uuid.uuid4().hex + uuid.uuid4().hex,
        QTG_AUDIT_KEY="smoke-audit-" + uuid.uuid4().hex,
        DJANGO_ALLOWED_HOSTS="127.0.0.1,localhost",
        QTG_VAR_DIR=str(tmp),
        # The smoke profile (production with the sandbox allowed): its movements to watch ...
        QTG_SANDBOX_ENABLED="1",
        # ... and its venues serve them (production's default is the real venues: live).
        QTG_VENUES="off",
        # Plain HTTP on the loopback: no TLS terminator in front of gunicorn here.
        DJANGO_SECURE_SSL_REDIRECT="0",
        QTG_SANDBOX_TIME_SCALE="0.01",
        QTG_TICK_SECONDS="0.5",
        # The demo's address book is activated as it is seeded: no day-long cool-down here.
        QTG_ADDRESS_COOLDOWN_SECONDS="0",
        QTG_METRICS_TOKEN=TOKEN,
        QTG_CELERY_QUEUE="smoke-" + uuid.uuid4().hex[:8],
        QTG_WORKER_POOL="solo",
        WEB_CONCURRENCY="1",
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        PYTHONUNBUFFERED="1",
    )
    env.update(extra)
    return env


def manage(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=True,
    )


def wait_until(url: str, accept, *, timeout: float = 90, **kwargs) -> httpx.Response:
    deadline, last = time.monotonic() + timeout, None
    while time.monotonic() < deadline:
        try:
            last = httpx.get(url, timeout=10, **kwargs)
            if accept(last):
                return last
        except httpx.TransportError:
            pass
        time.sleep(0.5)
    raise AssertionError(f"{url}: {last and (last.status_code, last.text)}")


def stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def json_lines(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


RUNTIME_ROLE = "qtg_smoke_runtime"


@contextmanager
def two_roles():
    """On PostgreSQL (the test run's DATABASE_URL): a fresh database owned by that URL's role,
    and the URL of the runtime role the deployment runs as (issue 28). Elsewhere: SQLite."""
    url = os.environ.get("DATABASE_URL", "")
    if not url.startswith("postgres"):
        yield None
        return
    import psycopg

    name = f"qtg_smoke_{uuid.uuid4().hex[:8]}"
    parts = urlsplit(url)
    maintenance = urlunsplit(parts._replace(path="/postgres"))
    with psycopg.connect(maintenance, autocommit=True) as conn:
        conn.execute(
            f"DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{RUNTIME_ROLE}') "
            f"THEN CREATE ROLE {RUNTIME_ROLE} LOGIN; END IF; END $$"
        )
        conn.execute(f"CREATE DATABASE {name}")
    owner = urlunsplit(parts._replace(path=f"/{name}"))
    host = parts.hostname + (f":{parts.port}" if parts.port else "")
    runtime = urlunsplit(parts._replace(netloc=f"{RUNTIME_ROLE}@{host}", path=f"/{name}"))
    try:
        yield {"owner": owner, "runtime": runtime}
    finally:
        with psycopg.connect(maintenance, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    """Prestart (as the database owner), seed the demo, then web + worker + beat from the
    Procfile (honcho); on PostgreSQL the seed and the processes run as the runtime role."""
    with two_roles() as roles:
        yield from _deployment(tmp_path_factory, roles)


def _deployment(tmp_path_factory, roles):
    tmp = tmp_path_factory.mktemp("production")
    port = free_port()
    env = production_env(tmp, QTG_BIND=f"127.0.0.1:{port}")
    if roles:
        owner = {**env, "DATABASE_URL": roles["owner"], "QTG_DB_RUNTIME_ROLE": RUNTIME_ROLE}
        prestart = manage(owner, "qtg_prestart")
        manage(owner, "qtg_db_grants", "--runtime-role", RUNTIME_ROLE)
        env["DATABASE_URL"] = roles["runtime"]
    else:
        prestart = manage(env, "qtg_prestart")
    seeded = manage(env, "seed_demo")
    output = tmp / "honcho.log"
    with output.open("w") as log:
        process = subprocess.Popen(
            ["honcho", "start", "-f", str(ROOT / "Procfile"), "-d", str(ROOT)],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        yield {
            "base": f"http://127.0.0.1:{port}",
            "tmp": tmp,
            "seed_log": seeded.stderr,
            "prestart": prestart,
            "roles": roles,
            "output": output,
        }
    finally:
        stop(process)


def test_health_is_200_with_database_broker_beat_and_worker_up(deployment):
    response = wait_until(f"{deployment['base']}/health/", lambda r: r.status_code == 200)

    body = response.json()
    # serving, with the switches this test sets to run on the loopback listed as weakened
    assert body["status"] == "degraded"
    assert {w["variable"] for w in body["weakened"]} == {
        "QTG_SANDBOX_ENABLED",
        "DJANGO_SECURE_SSL_REDIRECT",
        "QTG_ADDRESS_COOLDOWN_SECONDS",
    }
    assert {name for name, check in body["checks"].items() if check["status"] == "ok"} == {
        "database",
        "broker",
        "beat",
        "worker",
        "venues",
    }


def test_the_admin_css_is_served_by_the_web_process_with_debug_off(deployment):
    login = wait_until(f"{deployment['base']}/admin/login/", lambda r: r.status_code == 200)
    css = re.search(r'href="(/static/admin/css/base[.\w]*\.css)"', login.text)
    assert css, login.text[:500]

    response = httpx.get(deployment["base"] + css[1], timeout=10)

    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/css")


def test_the_api_docs_assets_are_served_too(deployment):
    wait_until(f"{deployment['base']}/health/", lambda r: r.status_code in (200, 503))
    base = f"{deployment['base']}/static/drf_spectacular_sidecar/swagger-ui-dist"

    css = httpx.get(f"{base}/swagger-ui.css", timeout=10)
    js = httpx.get(f"{base}/swagger-ui-bundle.js", timeout=10)

    assert (css.status_code, js.status_code) == (200, 200)
    assert css.headers["content-type"].startswith("text/css")
    assert "javascript" in js.headers["content-type"]


def test_metrics_requires_the_token_and_carries_every_name(deployment):
    url = f"{deployment['base']}/metrics"
    authorised = {"Authorization": f"Bearer {TOKEN}"}

    # the venue-call histogram appears with the workers' first venue call
    response = wait_until(
        url, lambda r: r.status_code == 200 and all(n in r.text for n in NAMES), headers=authorised
    )

    assert httpx.get(url, timeout=10).status_code == 401
    assert httpx.get(url, headers={"Authorization": "Bearer wrong"}, timeout=10).status_code == 401
    for name in NAMES:
        assert name in response.text, name


def test_a_movements_log_lines_are_json_carrying_its_id(deployment):
    # the demo's movements were created and approved by the seed: JSON transition lines
    created = [line for line in json_lines(deployment["seed_log"]) if "movement_id" in line]
    assert created, deployment["seed_log"][:2000]
    movement_ids = {line["movement_id"] for line in created}
    for line in deployment["seed_log"].splitlines():
        if any(movement_id in line for movement_id in movement_ids):
            json.loads(line)

    # and the worker moves them on, logging each transition as one JSON object with the id
    def worker_transitions() -> list[dict]:
        lines = []
        for line in deployment["output"].read_text().splitlines():
            label, _, text = line.partition("| ")
            if "worker" in label and any(m in text for m in movement_ids):
                lines.append(json.loads(text))
        return [line for line in lines if line.get("logger") == "movements.transitions"]

    deadline = time.monotonic() + 60
    while not worker_transitions() and time.monotonic() < deadline:
        time.sleep(0.5)
    lines = worker_transitions()
    assert lines, deployment["output"].read_text()[-3000:]
    assert all(line["movement_id"] in movement_ids for line in lines)
    assert all(line["actor"].startswith("system:") for line in lines)


@pytest.mark.parametrize(
    ("failing", "env"),
    [
        ("broker", {"CELERY_BROKER_URL": "redis://127.0.0.1:1/0"}),
        ("database", {"DATABASE_URL": "postgres://postgres@127.0.0.1:1/qtg_smoke"}),
    ],
)
def test_health_is_503_when_the_broker_or_the_database_is_unreachable(deployment, failing, env):
    port = free_port()
    process = subprocess.Popen(
        ["gunicorn", "qtg.wsgi:application", "--bind", f"127.0.0.1:{port}", "--workers", "1"],
        cwd=ROOT,
        env=production_env(deployment["tmp"], QTG_HEALTH_PING_SECONDS="0.5", **env),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        response = wait_until(
            f"http://127.0.0.1:{port}/health/", lambda r: r.status_code != 404, timeout=60
        )
    finally:
        stop(process)

    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "fail"
    assert body["checks"][failing]["status"] == "fail"


def test_every_line_of_web_worker_and_beat_is_json_and_a_request_is_logged_once(deployment):
    base = deployment["base"]
    wait_until(f"{base}/health/live", lambda r: r.status_code == 200)
    marker = f"/no-such-page-{uuid.uuid4().hex}"
    assert httpx.get(base + marker, timeout=10).status_code == 404
    time.sleep(2)

    lines = []
    for line in deployment["output"].read_text().splitlines():
        label, sep, text = line.partition("| ")
        name = label.split()[-1].split(".")[0] if label.split() else ""
        if sep and name in {"web", "worker", "beat"} and text.strip():
            lines.append((name, text))
    not_json = [(name, text) for name, text in lines if not text.lstrip().startswith("{")]
    assert not_json == [], not_json[:10]
    assert {name for name, _ in lines} >= {"web", "worker"}
    logged = [text for _, text in lines if marker in text]
    assert len(logged) == 1, logged


def test_prestart_writes_a_signed_checkpoint_and_the_runtime_role_cannot_rewrite_evidence(
    deployment,
):
    checkpoints = (deployment["tmp"] / "audit-checkpoints.jsonl").read_text().splitlines()
    assert json.loads(checkpoints[0])["reason"] == "prestart"
    roles = deployment["roles"]
    if roles is None:
        pytest.skip("database roles are PostgreSQL's (run with DATABASE_URL)")
    import psycopg

    # nothing to warn about: the app runs as a runtime role without those rights
    assert "WARNING" not in deployment["prestart"].stderr
    with psycopg.connect(roles["runtime"], autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM movements_movementevent").fetchone()[0] > 0
        for statement in (
            "DELETE FROM movements_movementevent",
            "TRUNCATE movements_movementevent CASCADE",
            "ALTER TABLE movements_movementevent DISABLE TRIGGER ALL",
            "UPDATE movements_movementapproval SET approver = 'mallory'",
        ):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(statement)

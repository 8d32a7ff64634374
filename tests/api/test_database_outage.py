"""The database really down, under the production profile (gunicorn, DEBUG off): every API
answer is a 503 problem document with `Retry-After` and the request id, never Django's HTML
error page, whether the request reads, creates or discovers."""

import subprocess
import uuid

import httpx
import pytest

from tests.ops.test_production_smoke import ROOT, free_port, production_env, stop, wait_until

# Its own processes, database and broker: the same on every run (tests/conftest.py).
pytestmark = [pytest.mark.slow, pytest.mark.self_contained]

# Nothing listens on port 1: every connection attempt is refused.
UNREACHABLE_DATABASE = "postgres://postgres@127.0.0.1:1/qtg_unreachable"


@pytest.fixture(scope="module")
def web_without_database(tmp_path_factory):
    port = free_port()
    env = production_env(tmp_path_factory.mktemp("outage"), DATABASE_URL=UNREACHABLE_DATABASE)
    process = subprocess.Popen(
        ["gunicorn", "qtg.wsgi:application", "--bind", f"127.0.0.1:{port}", "--workers", "1"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until(f"{base}/health/live", lambda r: r.status_code == 200, timeout=60)
        yield base
    finally:
        stop(process)


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("GET", "/api/v1/movements/", None),
        ("GET", "/api/v1/templates/", None),
        ("GET", "/api/v1/events/", None),
        ("POST", "/api/v1/movements/", b'{"template": "cex_to_cex"}'),
    ],
)
def test_with_the_database_down_the_api_answers_a_503_problem(
    web_without_database, method, path, body
):
    headers = {
        "Authorization": f"Token {uuid.uuid4().hex}",
        "Content-Type": "application/json",
        "Idempotency-Key": uuid.uuid4().hex,
    }

    response = httpx.request(
        method, f"{web_without_database}{path}", headers=headers, content=body, timeout=30
    )

    assert response.status_code == 503, response.text[:500]
    assert response.headers["content-type"] == "application/problem+json"
    problem = response.json()
    assert problem["code"] == "service_unavailable"
    assert problem["status"] == 503
    assert problem["details"]["request_id"] == response.headers["X-Request-ID"]
    assert int(response.headers["Retry-After"]) >= 1
    assert "127.0.0.1" not in response.text  # the connection error stays in the log

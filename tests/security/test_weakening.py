"""Issue 29, settings: secret keys by entropy and variety, /metrics fail-closed and under the
HTTPS policy, every weakening switch said out loud (start-up WARNING, /health/ degraded,
check --deploy), the sandbox never under "production", "testserver" only in embedded."""

import json
import secrets
from datetime import timedelta

import pytest
from django.core.management.utils import get_random_secret_key
from django.test import Client

from ops.health import Result, report
from qtg.configuration import VARIABLES
from qtg.profile import production_problems, secret_key_problem
from qtg.weakening import WEAKENINGS
from tests.security.test_profile import METRICS_TOKEN, STRONG_KEY, manage

PRODUCTION = {
    "QTG_PROFILE": "production",
    "DJANGO_SECRET_KEY": STRONG_KEY,
    "QTG_METRICS_TOKEN": METRICS_TOKEN,
    # Production refuses to start without an audit key of its own (issue 28).
    "QTG_AUDIT_KEY": "weakening-audit-" + secrets.token_hex(16),
}


@pytest.mark.parametrize("key", ["abcde" * 10, "abcdefghij" * 5, "0123456789abcdef" * 4])
def test_a_long_repetitive_secret_key_is_refused(key):
    assert "too" in secret_key_problem(key)


@pytest.mark.parametrize(
    "make", [get_random_secret_key, lambda: secrets.token_hex(25), lambda: secrets.token_hex(32)]
)
def test_generated_secret_keys_are_accepted(make):
    for _ in range(200):
        assert secret_key_problem(make()) is None


def test_the_production_server_refuses_a_repetitive_secret_key(tmp_path):
    result = manage("check", tmp_path=tmp_path, **{**PRODUCTION, "DJANGO_SECRET_KEY": "abcde" * 10})

    assert result.returncode != 0
    assert "DJANGO_SECRET_KEY is too" in result.stderr


def test_production_refuses_to_start_without_a_metrics_token(tmp_path):
    result = manage("check", tmp_path=tmp_path, **{**PRODUCTION, "QTG_METRICS_TOKEN": None})

    assert result.returncode != 0
    assert "QTG_METRICS_TOKEN is not set" in result.stderr


def test_metrics_without_a_token_answers_only_when_explicitly_opened(settings, db):
    settings.QTG_METRICS_TOKEN = ""
    settings.QTG_METRICS_OPEN = False

    assert Client().get("/metrics").status_code == 401

    settings.QTG_METRICS_OPEN = True
    assert Client().get("/metrics").status_code == 200


def test_metrics_follows_the_https_redirect(settings, db):
    settings.SECURE_SSL_REDIRECT = True
    settings.QTG_METRICS_OPEN = True

    response = Client().get("/metrics")

    assert response.status_code == 301
    assert response["Location"].startswith("https://")


def test_the_sandbox_never_runs_under_the_production_profile(tmp_path):
    env = {**PRODUCTION, "QTG_SANDBOX_ENABLED": "1", "QTG_SMOKE_TEST_ALLOWS_SANDBOX": "1"}

    result = manage("check", tmp_path=tmp_path, **env)

    assert result.returncode != 0
    assert "QTG_SANDBOX_ENABLED is on" in result.stderr


def test_the_smoke_profile_runs_the_sandbox_and_says_so():
    problems = production_problems(
        secret_key=STRONG_KEY, debug=False, sandbox_enabled=True, profile="smoke"
    )

    assert problems == []


def test_each_weakening_switch_is_a_start_up_warning_and_a_deploy_check_warning(tmp_path):
    # given a production start with single variables that each turn a protection off
    env = {
        **PRODUCTION,
        "QTG_OTP_REQUIRED": "0",
        "QTG_ADDRESS_BOOK_ENFORCED": "0",
        "QTG_TWO_PERSON_OVERRIDES": "0",
        "QTG_CALLBACKS_ALLOW_PRIVATE_TARGETS": "1",
        "DJANGO_SESSION_COOKIE_SECURE": "0",
        "QTG_METRICS_TOKEN": None,
        "QTG_METRICS_OPEN": "1",
    }
    templates = tmp_path / "route_templates"
    templates.mkdir()
    env["QTG_ROUTE_TEMPLATE_DIR"] = str(templates)

    assert manage("migrate", "--no-input", tmp_path=tmp_path, **env).returncode == 0
    result = manage("check", "--deploy", tmp_path=tmp_path, **env)

    # then it starts, logs each as a WARNING and check --deploy warns about each
    assert result.returncode == 0, result.stderr
    logged = [json.loads(line) for line in result.stderr.splitlines() if line.startswith("{")]
    warned = {line["weakened"] for line in logged if line.get("level") == "warning"}
    switched = {
        "QTG_OTP_REQUIRED",
        "QTG_ADDRESS_BOOK_ENFORCED",
        "QTG_TWO_PERSON_OVERRIDES",
        "QTG_CALLBACKS_ALLOW_PRIVATE_TARGETS",
        "DJANGO_SESSION_COOKIE_SECURE",
        "QTG_METRICS_OPEN",
    }
    assert warned == switched
    checked = result.stdout + result.stderr
    for variable in switched:
        assert f"{variable} weakens this deployment" in checked, variable


@pytest.fixture
def hardened(settings):
    """The production profile's own defaults: nothing weakened."""
    settings.QTG_PROFILE = "production"
    for name in ("QTG_SANDBOX_ENABLED", "QTG_TOKENS_FOR_OTHERS_ALONE", "QTG_METRICS_OPEN"):
        setattr(settings, name, False)
    for name in ("QTG_CALLBACKS_ALLOW_PRIVATE_TARGETS", "QTG_API_LEGACY_TOKENS"):
        setattr(settings, name, False)
    for name in (
        "QTG_OTP_REQUIRED",
        "QTG_ADDRESS_BOOK_ENFORCED",
        "QTG_TWO_PERSON_OVERRIDES",
        "QTG_API_DOCS_REQUIRE_LOGIN",
        "SESSION_COOKIE_SECURE",
        "CSRF_COOKIE_SECURE",
        "SECURE_SSL_REDIRECT",
        "SESSION_EXPIRE_AT_BROWSER_CLOSE",
    ):
        setattr(settings, name, True)
    settings.QTG_ADDRESS_COOLDOWN = timedelta(days=1)
    settings.SECURE_HSTS_SECONDS = 3600
    return settings


@pytest.mark.django_db(transaction=True)
def test_health_says_ok_with_nothing_weakened(hardened, client):
    assert client.get("/health/").json()["weakened"] == []


@pytest.mark.django_db(transaction=True)
def test_health_is_degraded_listing_the_weakening_switch(hardened, client):
    hardened.QTG_OTP_REQUIRED = False

    body = client.get("/health/").json()

    assert body["status"] in ("degraded", "fail")  # fail: no worker runs in this test
    assert [w["variable"] for w in body["weakened"]] == ["QTG_OTP_REQUIRED"]
    assert "password alone" in body["weakened"][0]["cost"]


def test_a_deployment_passing_every_check_with_a_switch_set_is_degraded_not_ok(hardened):
    passing = {"database": Result(True, "up", 0.0)}
    assert report(passing)["status"] == "ok"

    hardened.QTG_TWO_PERSON_OVERRIDES = False

    assert report(passing)["status"] == "degraded"


def test_every_variable_marked_weakening_is_in_the_weakening_table_or_refused():
    marked = {v.name for v in VARIABLES if v.weakens_security}
    listed = {w.variable for w in WEAKENINGS}
    # DEBUG is refused outright; the proxy headers are needed behind a proxy (runbook).
    exempt = {"DJANGO_DEBUG", "DJANGO_SECURE_PROXY_SSL_HEADER", "DJANGO_USE_X_FORWARDED_HOST"}

    assert listed <= marked
    assert marked - exempt == listed


def test_testserver_is_allowed_in_the_embedded_profile_only(tmp_path):
    code = "from django.conf import settings; print(','.join(settings.ALLOWED_HOSTS))"

    production = manage("shell", "-c", code, tmp_path=tmp_path, **PRODUCTION)
    embedded = manage("shell", "-c", code, tmp_path=tmp_path, QTG_PROFILE="embedded")

    assert production.returncode == 0, production.stderr
    assert "testserver" not in production.stdout.strip().splitlines()[-1]
    assert "testserver" in embedded.stdout.strip().splitlines()[-1]


def test_the_runbook_s_security_section_lists_every_weakening_switch_and_its_cost():
    from pathlib import Path

    runbook = (Path(__file__).resolve().parents[2] / "docs" / "runbook.md").read_text()
    section = runbook.split("## Security: the switches that weaken a deployment", 1)[1]
    section = section.split("\n## ", 1)[0]
    rows = {
        line.split("|")[1]: line.split("|")[2].strip()
        for line in section.splitlines()
        if line.startswith("| `")
    }

    for weakening in WEAKENINGS:
        row = next((cost for switch, cost in rows.items() if weakening.variable in switch), "")
        assert row, f"{weakening.variable} is not in the runbook's security section"

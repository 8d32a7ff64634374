"""Settings fail closed: the profile is named exactly, and production refuses to start with
demo-only or guessable settings (qtg/profile.py, the security block of qtg/settings.py)."""

import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

from qtg.profile import (
    EMBEDDED_AUDIT_KEY,
    ProfileRefused,
    production_problems,
    profile_from_env,
)

ROOT = Path(__file__).resolve().parents[2]
STRONG_KEY = secrets.token_urlsafe(64)
AUDIT_KEY = secrets.token_urlsafe(32)
METRICS_TOKEN = secrets.token_urlsafe(32)


def manage(*args: str, tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    environ = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("QTG_", "DJANGO_", "DATABASE_URL", "CELERY_"))
    }
    environ.update(QTG_VAR_DIR=str(tmp_path), **env)
    environ = {key: value for key, value in environ.items() if value is not None}
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=environ,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize("raw", [None, "", "Production", "prod", "embedded ", "staging"])
def test_a_profile_not_named_exactly_is_refused(raw):
    with pytest.raises(ProfileRefused, match="QTG_PROFILE must be exactly one of"):
        profile_from_env(raw)


def test_an_unset_profile_stops_the_start_instead_of_running_the_demo(tmp_path):
    result = manage("check", tmp_path=tmp_path)

    assert result.returncode != 0
    assert "QTG_PROFILE must be exactly one of" in result.stderr


@pytest.mark.parametrize(
    ("secret_key", "expected"),
    [
        ("", "not set"),
        ("qtg-embedded-insecure-key", "published"),
        ("django-insecure-" + "x" * 60, "published"),
        ("abcdefghij" * 4, "too short"),
        ("ab" * 40, "too short or too simple"),
    ],
)
def test_production_refuses_a_missing_published_or_weak_secret_key(secret_key, expected):
    problems = production_problems(
        secret_key=secret_key, debug=False, sandbox_enabled=False, audit_key=AUDIT_KEY
    )

    assert len(problems) == 1 and expected in problems[0]


def test_production_refuses_debug_and_the_sandbox():
    problems = production_problems(
        secret_key=STRONG_KEY, debug=True, sandbox_enabled=True, audit_key=AUDIT_KEY
    )

    assert [p.split(" ", 1)[0] for p in problems] == ["DJANGO_DEBUG", "QTG_SANDBOX_ENABLED"]


@pytest.mark.parametrize(
    ("audit_key", "expected"), [("", "no audit key"), (EMBEDDED_AUDIT_KEY, "published")]
)
def test_production_refuses_a_missing_or_published_audit_key(audit_key, expected):
    problems = production_problems(
        secret_key=STRONG_KEY, debug=False, sandbox_enabled=False, audit_key=audit_key
    )

    assert len(problems) == 1 and expected in problems[0]


def test_a_strong_key_without_debug_or_sandbox_is_accepted():
    assert (
        production_problems(
            secret_key=STRONG_KEY, debug=False, sandbox_enabled=False, audit_key=AUDIT_KEY
        )
        == []
    )


@pytest.mark.parametrize(
    "env",
    [
        {},
        {"DJANGO_SECRET_KEY": "qtg-embedded-insecure-key"},
        {"DJANGO_SECRET_KEY": STRONG_KEY, "DJANGO_DEBUG": "1"},
        {"DJANGO_SECRET_KEY": STRONG_KEY, "QTG_SANDBOX_ENABLED": "1"},
        # No audit key of its own: the chain's links would be signed with nothing.
        {"DJANGO_SECRET_KEY": STRONG_KEY},
    ],
)
def test_the_production_server_refuses_to_start(tmp_path, env):
    result = manage("check", tmp_path=tmp_path, QTG_PROFILE="production", **env)

    assert result.returncode != 0
    assert "QTG_PROFILE=production refuses to start" in result.stderr


def test_check_deploy_is_clean_in_production(tmp_path):
    # The shipped templates name sandbox executors, which production leaves out: a deployment
    # brings templates for its own venues (none here). The schema check reads the templates
    # table: a migrated database, as deployed.
    templates = tmp_path / "route_templates"
    templates.mkdir()
    env = {
        "QTG_PROFILE": "production",
        "DJANGO_SECRET_KEY": STRONG_KEY,
        "QTG_AUDIT_KEY": AUDIT_KEY,
        "QTG_METRICS_TOKEN": METRICS_TOKEN,
        "QTG_ROUTE_TEMPLATE_DIR": str(templates),
    }
    assert manage("migrate", "--no-input", tmp_path=tmp_path, **env).returncode == 0

    result = manage(
        "check",
        "--deploy",
        "--fail-level",
        "WARNING",
        tmp_path=tmp_path,
        **env,
    )

    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


def test_production_sends_cookies_over_tls_only_with_hsts_a_redirect_and_private_docs(tmp_path):
    code = (
        "from django.conf import settings as s; print(s.SESSION_COOKIE_SECURE, "
        "s.CSRF_COOKIE_SECURE, s.SECURE_SSL_REDIRECT, s.SECURE_HSTS_SECONDS > 0, "
        "s.SECURE_PROXY_SSL_HEADER, s.SESSION_COOKIE_AGE, 'sandbox' in s.INSTALLED_APPS, "
        "s.QTG_API_DOCS_REQUIRE_LOGIN)"
    )
    result = manage(
        "shell",
        "-c",
        code,
        tmp_path=tmp_path,
        QTG_PROFILE="production",
        DJANGO_SECRET_KEY=STRONG_KEY,
        QTG_AUDIT_KEY=AUDIT_KEY,
        QTG_METRICS_TOKEN=METRICS_TOKEN,
        DJANGO_SECURE_PROXY_SSL_HEADER="HTTP_X_FORWARDED_PROTO:https",
        DJANGO_SESSION_COOKIE_AGE="3600",
    )

    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1].split() == [
        "True",
        "True",
        "True",
        "True",
        "('HTTP_X_FORWARDED_PROTO',",
        "'https')",
        "3600",
        "False",
        "True",
    ]

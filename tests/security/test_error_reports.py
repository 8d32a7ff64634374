"""DEBUG pages and error reports do not show the passwords inside DATABASE_URL and
CELERY_BROKER_URL (settings and the environment in the request's META)."""

import sys

import pytest
from django.test import RequestFactory
from django.views.debug import ExceptionReporter

from tests.conftest import make_user

SECRET = "s3cr3t-pw"


@pytest.fixture
def report(settings):
    settings.DEBUG = True
    settings.DATABASE_URL = f"postgres://qtg:{SECRET}@db.internal:5432/qtg"
    settings.CELERY_BROKER_URL = f"amqp://qtg:{SECRET}@mq.internal:5672//"

    def _report() -> str:
        request = RequestFactory().get(
            "/boom", DATABASE_URL=f"redis://:{SECRET}@cache.internal:6379/0"
        )
        try:
            raise RuntimeError("boom")
        except RuntimeError:
            reporter = ExceptionReporter(request, *sys.exc_info())
        return reporter.get_traceback_html() + reporter.get_traceback_text()

    return _report


def test_the_debug_page_masks_passwords_in_urls(report):
    page = report()

    assert SECRET not in page
    assert "postgres://qtg:********************@db.internal:5432/qtg" in page
    assert "mq.internal" in page


# --- 14: schema and docs behind a login in production ----------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize("url", ["/api/schema/", "/api/docs/"])
def test_schema_and_docs_need_a_login_when_the_setting_says_so(client, settings, url):
    settings.QTG_API_DOCS_REQUIRE_LOGIN = True

    anonymous = client.get(url)
    client.force_login(make_user("reader"))
    signed_in = client.get(url)

    assert anonymous.status_code in (401, 403)
    assert signed_in.status_code == 200


@pytest.mark.django_db
def test_the_embedded_demo_serves_the_docs_to_anyone(client, settings):
    settings.QTG_API_DOCS_REQUIRE_LOGIN = False

    assert client.get("/api/schema/").status_code == 200

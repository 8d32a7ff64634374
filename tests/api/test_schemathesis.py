"""Property-based conformance: Schemathesis generates requests from the live OpenAPI schema
for every operation, valid and invalid, and checks every response with every built-in check:
no 5xx (``not_a_server_error``), only documented status codes (``status_code_conformance``),
documented content types and headers, bodies that match their schema, valid data accepted,
invalid data refused. The test asserts those checks ran, on every operation of the contract.

Deterministic (derandomized, no example database) and bounded, so it runs in CI in seconds.
"""

import re
from collections import Counter

import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from schemathesis.generation import GenerationMode

from callbacks.models import Subscription
from movements.api.fields import TEMPLATE_KEY_PATTERN, VENUE_PATTERN
from tests.api.conftest import client_for, post_create, token_for
from tests.api.test_schema import OPERATIONS
from tests.conftest import ALL_MOVEMENT_PERMS, make_user

KNOWN_TEMPLATES = ("cex_to_cex", "cex_to_cex_gated")
# Checks that must run on every response (Schemathesis enables every built-in by default).
CHECKS_ON = {
    "not_a_server_error",
    "status_code_conformance",
    "content_type_conformance",
    "response_headers_conformance",
    "response_schema_conformance",
    "problem_code_is_documented",
}
POSITIVE_EXAMPLES = 25
NEGATIVE_EXAMPLES = 15
SETTINGS = dict(
    derandomize=True,
    database=None,
    deadline=None,
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=list(HealthCheck),
)


@pytest.fixture
def existing(db) -> list[str]:
    """Movements made by someone else, so generated approvals are not all four-eyes refusals.
    (Made before ``wsgi_app``: Django's test client reconnects the signals it disconnects.)"""
    seeder = client_for(make_user("seeder"))
    return [post_create(seeder).json()["id"] for _ in range(3)]


@pytest.fixture
def wsgi_app(existing):
    """The real WSGI application, minus the connection closing around each request that
    would end the test's transaction (Django's own test client does the same)."""
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    try:
        yield get_wsgi_application()
    finally:
        request_started.connect(close_old_connections)
        request_finished.connect(close_old_connections)


def load_schema(app):
    config = schemathesis.Config()
    # A NUL byte is refused with a 400 everywhere (PostgreSQL cannot store it), which the schema
    # cannot say about free-form strings; don't count those refusals as rejected valid data.
    config.projects.override.generation.update(allow_x00=False, codec="utf-8")
    # A valid create may reuse a generated Idempotency-Key with another body: the IETF draft's
    # 422 is then the right answer to schema-valid data (as 409 is to an illegal transition).
    acceptance = config.projects.override.checks.positive_data_acceptance
    acceptance.expected_statuses = [*acceptance.expected_statuses, "422"]
    schema = schemathesis.openapi.from_wsgi("/api/schema/", app, config=config)

    @schema.hook("map_body")
    def known_templates_and_venues(context, body):
        # Templates and venues are strings in the schema (read at run time from
        # /api/v1/templates/ and /venues/): a generated string that matches their pattern
        # is schema-valid yet names nothing, a 400. Like a client, pick real ones; a string
        # that breaks the pattern (negative data) is left as generated.
        if context.operation.path != "/api/v1/movements/" or not isinstance(body, dict):
            return body
        body = dict(body)
        # JSON Schema (OpenAPI 3.1) counts 60.0 as an integer; the API has refused it since
        # 1.0 (an integer is written without a fraction): send what a client's encoder does.
        seconds = body.get("expires_in_seconds")
        if isinstance(seconds, float) and seconds.is_integer():
            body["expires_in_seconds"] = int(seconds)
        for field, pattern, known in (
            ("template", TEMPLATE_KEY_PATTERN, KNOWN_TEMPLATES),
            ("source", VENUE_PATTERN, "sandbox-exchange-a"),
            ("destination", VENUE_PATTERN, "sandbox-exchange-b"),
        ):
            value = body.get(field)
            if isinstance(value, str) and re.search(pattern, value):
                body[field] = known if isinstance(known, str) else known[len(value) % 2]
        return body

    return schema


def problem_code_is_documented(ctx, response, case):
    """A problem's `code` is one the operation documents for that status ("Codes: ...")."""
    if response.status_code < 400:
        return None
    code = response.json()["code"]
    documented = case.operation.definition.raw["responses"][str(response.status_code)]
    if f"`{code}`" not in documented["description"]:
        raise AssertionError(
            f"{case.operation.label} answered {response.status_code} `{code}`, which its "
            f"schema does not list: {documented['description']}"
        )
    return None


@pytest.mark.django_db
def test_every_operation_conforms_to_the_schema_for_generated_input(existing, wsgi_app):
    given_user = make_user("fuzzer", *ALL_MOVEMENT_PERMS)
    auth = {"Authorization": f"Token {token_for(given_user)}"}
    webhook = Subscription.objects.create(
        owner=given_user,
        name="fuzzed",
        url="http://127.0.0.1:9/hook",
        event_types=["request_failed"],
    )
    schema = load_schema(wsgi_app)
    operations = [result.ok() for result in schema.get_all_operations()]
    # Every operation of the contract (test_schema.OPERATIONS), none left out.
    assert {(op.path, op.method.lower()) for op in operations} == set(OPERATIONS)
    cases = 0
    checks_run: set[str] = set()
    statuses: Counter = Counter()
    called: set[tuple[str, str]] = set()

    @schema.hook("after_validate")
    def record(context, case, response, results):
        checks_run.update(result.name for result in results)
        statuses[response.status_code] += 1
        called.add((case.operation.path, case.operation.method.lower()))

    for operation in operations:
        ids = []
        if "{id}" in operation.path:
            ids = [str(webhook.pk)] if "/webhooks/" in operation.path else existing
        strategies = {
            GenerationMode.POSITIVE: st.one_of(
                operation.as_strategy(GenerationMode.POSITIVE),
                *[
                    operation.as_strategy(GenerationMode.POSITIVE, path_parameters={"id": pk})
                    for pk in ids
                ],
            ),
            GenerationMode.NEGATIVE: operation.as_strategy(GenerationMode.NEGATIVE),
        }
        budgets = {
            GenerationMode.POSITIVE: POSITIVE_EXAMPLES,
            GenerationMode.NEGATIVE: NEGATIVE_EXAMPLES,
        }
        for mode, strategy in strategies.items():

            @settings(max_examples=budgets[mode], **SETTINGS)
            @given(case=strategy)
            def check(case):
                nonlocal cases
                cases += 1
                case.call_and_validate(headers=auth, additional_checks=[problem_code_is_documented])

            check()

    print(
        f"schemathesis: {cases} generated cases over {len(operations)} operations, "
        f"statuses {dict(sorted(statuses.items()))}, checks {sorted(checks_run)}"
    )
    assert cases >= 600
    assert called == set(OPERATIONS)
    assert CHECKS_ON <= checks_run
    assert not [status for status in statuses if status >= 500]

"""A create at API speed (issue 34): the answer is built from the rows the create wrote (no
read of the movement after it), exactly what a GET then shows; and its statements on
PostgreSQL, counted per create (each parameter set of a pipelined ``executemany`` one)."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from callbacks.models import Event, Subscription
from tests.api.conftest import client_for, movement_url, post_create
from tests.conftest import make_user
from tests.statements import statements

# 21 for the create itself (its two callback events and their deliveries in one insert each;
# no savepoint), and one read of the people who may approve it: they are notified in the
# create's transaction (notifications, issue 31), from the rows the create holds.
STATEMENTS_PER_CREATE = 22
MOVEMENT_TABLE = 'FROM "movements_movementrequest"'


@pytest.fixture
def integration_client(db):
    Subscription.objects.create(
        name="all", url="https://hooks.example.com/all", secret="s" * 32, event_types=["*"]
    )
    return client_for(make_user("integration", "view_movementrequest"))


def test_the_create_answer_is_what_a_get_then_shows(integration_client):
    created = post_create(integration_client)

    assert created.status_code == 201, created.content
    shown = integration_client.get(movement_url(created.json()["id"]))
    assert created.json() == shown.json()
    assert created.json()["reservation"] == {"state": "HELD", "amount": "100.5"}
    assert {n["node_state"] for n in created.json()["nodes"]} == {"BLOCKED"}


def test_the_create_reads_no_movement_row_after_writing_it(integration_client):
    post_create(integration_client)  # the token's first use, the templates' cache

    with CaptureQueriesContext(connection) as captured:
        created = post_create(integration_client)

    assert created.status_code == 201, created.content
    sent = statements(captured)
    inserted = next(
        i for i, sql in enumerate(sent) if sql.startswith('INSERT INTO "movements_movementrequest"')
    )
    reads = [
        sql
        for sql in sent[inserted:]
        if sql.startswith("SELECT") and MOVEMENT_TABLE in sql.split(" WHERE ")[0]
    ]
    assert reads == []


@pytest.mark.postgres
def test_a_create_sends_a_bounded_number_of_statements(integration_client):
    post_create(integration_client)

    with CaptureQueriesContext(connection) as captured:
        created = post_create(integration_client)

    assert created.status_code == 201, created.content
    sent = statements(captured)
    print(f"\n{len(sent)} statements per create through the API")
    assert len(sent) <= STATEMENTS_PER_CREATE, "\n".join(s[:160] for s in sent)
    events = Event.objects.filter(request_id=created.json()["id"]).order_by("sequence")
    assert [(e.event_type, e.sequence) for e in events] == [
        ("request_created", 1),
        ("approval_pending", 2),
    ]

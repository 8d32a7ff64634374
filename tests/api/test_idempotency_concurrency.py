"""Ten identical creates racing on PostgreSQL make one movement: the key is held while the
first is being created (a duplicate meanwhile is a 409, IETF draft), the database constraint
on (created_by, idempotency_key) decides, and later duplicates get the winner back (200)."""

import threading

import pytest
from django.db import connection, transaction

from movements.models import MovementEvent, MovementRequest
from tests.api.conftest import client_for, create_body, post_create
from tests.conftest import make_user

CLIENTS = 10


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_ten_concurrent_identical_posts_create_one_movement():
    user = make_user("racing-bot")
    clients = [client_for(user) for _ in range(CLIENTS)]
    start = threading.Barrier(CLIENTS)
    responses = [None] * CLIENTS

    def post(index: int) -> None:
        try:
            start.wait()
            responses[index] = post_create(clients[index], create_body(), key="race-1")
        finally:
            connection.close()  # each thread had its own connection

    threads = [threading.Thread(target=post, args=(i,)) for i in range(CLIENTS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    statuses = [r.status_code for r in responses]
    assert statuses.count(201) == 1, [r.content for r in responses]
    assert set(statuses) <= {200, 201, 409}, [r.content for r in responses]
    for response in responses:
        if response.status_code == 409:
            assert response.json()["code"] == "idempotency_in_progress"
    responses = [r for r in responses if r.status_code != 409]
    assert len({r.json()["id"] for r in responses}) == 1
    assert MovementRequest.objects.count() == 1
    created_events = MovementEvent.objects.filter(kind=MovementEvent.Kind.CREATED).count()
    assert created_events == 1


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_duplicate_while_the_first_is_still_in_progress_is_a_409_then_a_replay():
    user = make_user("slow-bot")
    client = client_for(user)
    held, release = threading.Event(), threading.Event()

    def first_in_progress() -> None:
        # What the first request holds while it creates the movement (movement_create).
        try:
            with transaction.atomic(), connection.cursor() as cursor:
                cursor.execute(
                    "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))",
                    [f"qtg-idempotency:{user.pk}:order-77"],
                )
                held.set()
                release.wait(timeout=30)
        finally:
            connection.close()

    thread = threading.Thread(target=first_in_progress)
    thread.start()
    assert held.wait(timeout=30)
    try:
        during = post_create(client, create_body(), key="order-77")
    finally:
        release.set()
        thread.join(timeout=30)
    created = post_create(client, create_body(), key="order-77")
    replayed = post_create(client, create_body(), key="order-77")

    assert during.status_code == 409
    assert during["Content-Type"] == "application/problem+json"
    assert during.json()["code"] == "idempotency_in_progress"
    assert int(during["Retry-After"]) >= 1  # contract 1.2: retry it, after this long
    assert (created.status_code, replayed.status_code) == (201, 200)
    assert MovementRequest.objects.count() == 1

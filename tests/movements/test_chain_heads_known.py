"""``qtg.core.chain.heads_known``: a service that read a stream's head under the movement's lock
links its rows after it without reading it again, and never after a row a rolled-back savepoint
took away."""

import pytest
from django.db import connection, transaction
from django.db.transaction import TransactionManagementError
from django.test.utils import CaptureQueriesContext

from movements.audit import movement_chain_breaks
from movements.models import MovementEvent
from movements.services.state import record_event
from qtg.core.actors import Actor
from qtg.core.chain import heads_known

ACTOR = Actor.system("tests")


def newest(movement) -> MovementEvent:
    return MovementEvent.objects.filter(request=movement).order_by("-pk").first()


def test_rows_are_linked_after_the_known_head_without_reading_it(make_movement):
    movement = make_movement()
    head = newest(movement).chain_hash

    with (
        transaction.atomic(),
        heads_known({MovementEvent: {movement.pk: head}}),
        CaptureQueriesContext(connection) as captured,
    ):
        first = record_event(request=movement, actor=ACTOR, detail={"n": 1})
        second = record_event(request=movement, actor=ACTOR, detail={"n": 2})

    assert [q["sql"].split()[0] for q in captured.captured_queries] == ["INSERT", "INSERT"]
    assert first.chain_prev == head
    assert second.chain_prev == first.chain_hash
    assert movement_chain_breaks(movement.pk) == []


def test_a_head_rolled_back_with_its_savepoint_is_read_again(make_movement):
    movement = make_movement()
    head = newest(movement).chain_hash

    with transaction.atomic(), heads_known({MovementEvent: {movement.pk: head}}):
        kept = record_event(request=movement, actor=ACTOR, detail={"kept": True})
        with pytest.raises(RuntimeError), transaction.atomic():
            record_event(request=movement, actor=ACTOR, detail={"rolled back": True})
            raise RuntimeError("the savepoint is rolled back")
        after = record_event(request=movement, actor=ACTOR, detail={"after": True})

    assert after.chain_prev == kept.chain_hash
    assert movement_chain_breaks(movement.pk) == []


@pytest.mark.django_db(transaction=True)
def test_heads_are_known_only_inside_a_transaction():
    with pytest.raises(TransactionManagementError), heads_known({MovementEvent: {"any": ""}}):
        pass

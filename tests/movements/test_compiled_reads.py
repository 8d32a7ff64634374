"""The reads compiled once (``qtg.core.compiled``) give what the ORM gives, on SQLite and on
PostgreSQL: the same instances with their related objects and annotations, the same rows, with
each call's own values, and the ORM's own errors for a value that is not one."""

import uuid
from unittest import mock

import pytest
from django.core.exceptions import ValidationError
from django.db import connection, transaction
from django.db.models.sql.compiler import SQLCompiler
from django.db.transaction import TransactionManagementError
from django.utils import timezone

from movements.models import MovementRequest, MovementRequestNode
from movements.selectors import _for_decision, current_nodes, movement_for_decision
from movements.services.execution import claims
from qtg.core.compiled import Compiled

pytestmark = pytest.mark.django_db


def fields(instance) -> dict:
    return {f.attname: getattr(instance, f.attname) for f in instance._meta.concrete_fields}


@pytest.fixture
def two(make_movement):
    """An approved movement (its root node READY) and one waiting for approval."""
    return make_movement(approve=True), make_movement()


def test_a_compiled_read_gives_what_the_orm_gives_with_each_calls_values(two):
    with transaction.atomic():
        for movement in two:
            orm = _for_decision(True, pk=movement.pk).get()
            compiled = movement_for_decision(movement.pk)
            assert fields(compiled) == fields(orm)
            # the annotations and the objects select_related read, each movement its own
            assert (compiled.event_head, compiled.has_open_attention) == (
                orm.event_head,
                orm.has_open_attention,
            )
            assert compiled.created_by.username == orm.created_by.username
            assert fields(compiled.reservation) == fields(orm.reservation)
        heads = {movement_for_decision(m.pk).event_head for m in two}
        assert len(heads) == 2  # not the first call's answer again

        nodes = current_nodes(two[0], lock=True)
        expected = list(
            MovementRequestNode.objects.current()
            .filter(request=two[0])
            .select_related("plan_node")
            .order_by("plan_node__position", "pk")
        )
        assert [fields(n) for n in nodes] == [fields(n) for n in expected]
        assert [n.plan_node.key for n in nodes] == [n.plan_node.key for n in expected]


def test_a_compiled_read_is_compiled_once_per_shape_and_a_list_once_per_length(two):
    read = Compiled(
        lambda *, requests: MovementRequest.objects.filter(pk__in=requests).order_by("pk"),
        requests=MovementRequest._meta.pk,
    )
    ids = sorted(m.pk for m in two)
    with mock.patch.object(
        SQLCompiler, "as_sql", autospec=True, side_effect=SQLCompiler.as_sql
    ) as spy:
        assert [m.pk for m in read(requests=ids)] == ids
        assert [m.pk for m in read(requests=ids[::-1])] == ids
        assert [m.pk for m in read(requests=ids[:1])] == ids[:1]
        assert [m.pk for m in read(requests=ids[1:])] == ids[1:]
        assert read(requests=[uuid.uuid4()]) == []
    compiled = [call for call in spy.call_args_list if call.args[0].query.model is MovementRequest]
    assert len(compiled) == 2  # one list of two, one of one
    assert read(requests=[]) == []  # the ORM's own answer (no statement at all)


def test_a_value_that_is_not_one_is_refused_as_the_orm_refuses_it(two):
    with transaction.atomic():
        with pytest.raises(ValidationError):
            movement_for_decision("not-a-uuid")
        with pytest.raises(MovementRequest.DoesNotExist):
            movement_for_decision(uuid.uuid4())


def refused(read) -> bool:
    try:
        read()
    except TransactionManagementError:
        return True
    return False


@pytest.mark.django_db(transaction=True)
def test_a_locking_read_outside_a_transaction_is_refused_as_the_orm_refuses_it(make_movement):
    movement = make_movement()
    with transaction.atomic():
        movement_for_decision(movement.pk)  # compiled, in a transaction
    orm = refused(lambda: _for_decision(True, pk=movement.pk).get())
    assert refused(lambda: movement_for_decision(movement.pk)) == orm
    # Where there are row locks to take (PostgreSQL) the ORM refuses; SQLite has none.
    assert orm == connection.features.has_select_for_update


def test_the_claim_read_takes_the_time_of_each_call(two):
    first, _ = two
    later = timezone.now() + timezone.timedelta(hours=1)
    MovementRequestNode.objects.filter(request=first).update(next_attempt_at=later)
    with transaction.atomic():
        assert (
            claims._CLAIMABLE(
                (claims.NS.READY,), claims.DISPATCH_REQUEST_STATES, 10, now=timezone.now()
            )
            == []
        )
    with transaction.atomic():
        due = claims._CLAIMABLE((claims.NS.READY,), claims.DISPATCH_REQUEST_STATES, 10, now=later)
        assert {node.request_id for node in due} == {first.pk}


def test_a_bound_read_is_the_orms_statement_with_the_calls_values_compiled_once(two):
    """A compare-and-set embeds a compiled read (``Compiled.bound``): the same SQL and
    parameters as the ORM's compile of the same queryset, each call its own values, and the
    same rows where a writer runs it as a queryset."""
    build = Compiled(
        lambda *, request: (
            MovementRequestNode.objects.current()
            .filter(request_id=request, node_state="READY")
            .values("pk")
        ),
        request=MovementRequestNode._meta.get_field("request"),
    )
    for movement in two:
        orm = (
            MovementRequestNode.objects.current()
            .filter(request_id=movement.pk, node_state="READY")
            .values("pk")
        )
        bound = build.bound(request=movement.pk)
        sql, params = orm.query.get_compiler(connection=connection).as_sql()
        assert bound.sql() == (sql, list(params))
        assert list(bound.queryset()) == list(orm)
    with mock.patch.object(SQLCompiler, "as_sql", side_effect=AssertionError("compiled again")):
        assert build.bound(request=two[1].pk).sql()[1] != build.bound(request=two[0].pk).sql()[1]
    with pytest.raises(ValueError):
        Compiled(
            lambda *, ids: MovementRequest.objects.filter(pk__in=ids), ids=MovementRequest._meta.pk
        ).bound(ids=[])

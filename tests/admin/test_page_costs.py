"""What the busiest console pages cost does not grow with the rows they show: the list and the
home page's queue ask each permission of Django's authentication backends once per page,
send the same statements for 5 rows as for 30, and the list's checkbox is Django's own."""

from unittest import mock

import pytest
from django.contrib.admin import ModelAdmin
from django.contrib.auth.backends import ModelBackend
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from movements.admin.filters import NEEDS_ME
from movements.models import MovementRequest
from tests.statements import statements

LIST = reverse("admin:movements_movementrequest_changelist")
HOME = reverse("admin:index")


def _fill(make_movement, creator, rows: int) -> None:
    while MovementRequest.objects.count() < rows:
        make_movement(by=creator)


def _backend_asks(client, url: str) -> int:
    """How many times the page asks the authentication backends for a permission."""
    with mock.patch.object(
        ModelBackend, "has_perm", autospec=True, side_effect=ModelBackend.has_perm
    ) as asked:
        response = client.get(url)
    assert response.status_code == 200
    return asked.call_count


def _statements(client, url: str) -> int:
    with CaptureQueriesContext(connection) as captured:
        response = client.get(url)
    assert response.status_code == 200
    return len(statements(captured))


@pytest.mark.parametrize("url", [LIST, f"{LIST}?state={NEEDS_ME}", HOME])
def test_a_page_asks_each_permission_once_however_many_rows_it_shows(
    client, op, make_movement, creator, url
):
    # given an operator's pages with 5 movements waiting for approval, then 30
    client.force_login(op)
    client.get(url)  # the session, the content types
    _fill(make_movement, creator, 5)
    five = _backend_asks(client, url)

    # when six times as many rows are shown
    _fill(make_movement, creator, 30)
    thirty = _backend_asks(client, url)

    # then the backends are asked exactly as often (once per permission, not per row)
    assert thirty == five, f"{five} permission checks for 5 rows but {thirty} for 30"


@pytest.mark.parametrize("url", [f"{LIST}?state={NEEDS_ME}", HOME])
def test_a_page_sends_the_same_statements_for_5_rows_as_for_30(
    client, op, make_movement, creator, url
):
    # given the "needs me" list and the home page with 5 movements in the queue
    client.force_login(op)
    client.get(url)
    _fill(make_movement, creator, 5)
    five = _statements(client, url)

    # when 30 are
    _fill(make_movement, creator, 30)
    thirty = _statements(client, url)

    # then each costs the same statements
    assert thirty == five, f"{five} statements for 5 rows but {thirty} for 30"


def test_the_list_checkbox_is_exactly_djangos(rf, op, make_movement):
    from django.contrib import admin

    # given a movement of the list
    movement = make_movement(amount="1234.5")
    model_admin = admin.site._registry[MovementRequest]

    # when its checkbox is rendered by the list and by Django's own ModelAdmin
    ours = model_admin.action_checkbox(movement)
    djangos = ModelAdmin.action_checkbox(model_admin, movement)

    # then they are the same HTML
    assert str(ours) == str(djangos)


@pytest.mark.parametrize("model", ["MovementRequest", "MovementRequestNode"])
def test_the_state_fields_read_once_per_class_are_django_fsms(db, model):
    from django_fsm import ConcurrentTransitionMixin

    from movements import models

    # given a movement model, which remembers its FSM fields per class
    instance = getattr(models, model)()

    # when its state fields are asked, and django-fsm-2's own filter is asked
    ours = list(instance.state_fields)
    fsms = list(ConcurrentTransitionMixin.state_fields.fget(instance))

    # then they are the same fields
    assert ours == fsms and len(ours) == 1

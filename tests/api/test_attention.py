"""The API's view of attention: the detail lists what needs a person now, and the list filters
on it (``needs_attention=true``)."""

from datetime import timedelta

import pytest
from django.utils import timezone

from movements.services.attention import attention_snooze, detect_stuck_nodes
from qtg.core.actors import Actor
from tests.api.conftest import MOVEMENTS, assert_error, movement_url
from tests.execution.conftest import fast_sandbox, run_workers_once  # noqa: F401
from tests.movements.drive import node

pytestmark = pytest.mark.django_db


@pytest.fixture
def stuck(make_movement, settings):
    """An approved movement whose deposit is not seen for an hour, stuck for the detector."""
    movement = make_movement(approve=True, params={"sandbox": {"deposit_observe": "delay:3600"}})
    for _ in range(20):
        run_workers_once()
    assert node(movement, "deposit_observe").node_state == "OBSERVING"
    settings.QTG_STUCK_AFTER_SECONDS = 1
    detect_stuck_nodes(now=timezone.now() + timedelta(seconds=5))
    return movement


def test_the_detail_lists_what_needs_attention(stuck, approver_client):
    body = approver_client.get(movement_url(stuck.pk)).json()

    [entry] = body["attention"]
    assert entry["node_key"] == "deposit_observe"
    assert entry["reason"] == "stuck"
    assert entry["since"]
    assert "deposit_observe has been OBSERVING" in entry["message"]


def test_a_movement_without_anything_to_look_at_has_an_empty_attention_list(
    make_movement, approver_client
):
    body = approver_client.get(movement_url(make_movement().pk)).json()

    assert body["attention"] == []


def test_the_list_filters_movements_needing_attention(stuck, make_movement, approver_client):
    calm = make_movement()

    needing = approver_client.get(MOVEMENTS, {"needs_attention": "true"}).json()
    others = approver_client.get(MOVEMENTS, {"needs_attention": "false"}).json()

    assert [m["id"] for m in needing["results"]] == [str(stuck.pk)]
    assert str(calm.pk) in [m["id"] for m in others["results"]]
    assert str(stuck.pk) not in [m["id"] for m in others["results"]]


def test_a_snoozed_entry_leaves_the_list_until_its_time(stuck, operator, approver_client):
    [entry] = stuck.attentions.all()
    attention_snooze(
        request=stuck,
        node_key=entry.node_key,
        until=timezone.now() + timedelta(hours=2),
        reason="venue maintenance",
        actor=Actor.for_user(operator),
    )

    assert approver_client.get(movement_url(stuck.pk)).json()["attention"] == []
    assert approver_client.get(MOVEMENTS, {"needs_attention": "true"}).json()["results"] == []


def test_a_malformed_needs_attention_filter_is_a_400(approver_client):
    assert_error(approver_client.get(MOVEMENTS, {"needs_attention": "maybe"}), 400)

"""A FAILED or MANUAL_INTERVENTION movement says which node put it there, and with what error."""

import pytest

from tests.execution.conftest import settle

pytestmark = pytest.mark.django_db


def test_a_refused_withdrawal_names_its_node_and_the_venue_error(make_movement):
    movement = settle(make_movement(approve=True, params={"sandbox": {"withdraw": "fail"}}))

    assert movement.request_state == "FAILED"
    assert movement.failure_reason.startswith("withdraw failed: ")
    assert "sandbox fault 'fail'" in movement.failure_reason


def test_a_rejected_deposit_after_the_withdrawal_names_the_deposit(make_movement):
    movement = settle(
        make_movement(approve=True, params={"sandbox": {"deposit_observe": "observe_fail"}})
    )

    assert movement.request_state == "MANUAL_INTERVENTION"
    assert movement.failure_reason.startswith("deposit_observe failed: ")

"""What a route template rules out is refused when the movement is created (RECEIVED ->
FAILED with the reason), never found after approval by a venue."""

import pytest

pytestmark = pytest.mark.django_db


def test_a_route_refuses_an_asset_it_cannot_move_when_the_movement_is_created(make_movement):
    movement = make_movement("cctp", asset="USDT", approve=False)

    assert movement.request_state == "FAILED"
    assert movement.failure_reason == "route template cctp: this route moves USDC only, not USDT"
    assert movement.events.filter(old_state="RECEIVED", new_state="FAILED").exists()
    assert not movement.nodes.exists()

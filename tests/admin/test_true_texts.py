"""Confirmation texts say what the action does under the rules in force: the two-person rule
on or off, and what becomes of the reservation (HELD once money left a venue)."""

import pytest

from tests.admin.helpers import action_url


def confirmation_text(client, movement, action: str) -> str:
    html = client.get(action_url(movement, action)).content.decode()
    start = html.index('id="qtg-what-happens"')
    return html[start : html.index("</p>", start)]


@pytest.mark.parametrize("action", ["force_fail", "force_complete"])
def test_with_the_two_person_rule_off_a_force_happens_at_once(
    action, settings, client, supervisor, intervention_failed
):
    settings.QTG_TWO_PERSON_OVERRIDES = False
    movement = intervention_failed()
    client.force_login(supervisor)

    text = confirmation_text(client, movement, action)

    assert "two-person rule is off" in text
    assert "proposes" not in text


@pytest.mark.parametrize("action", ["force_fail", "force_complete"])
def test_with_the_two_person_rule_on_a_force_is_a_proposal(
    action, settings, client, supervisor, intervention_failed
):
    settings.QTG_TWO_PERSON_OVERRIDES = True
    movement = intervention_failed()
    client.force_login(supervisor)

    text = confirmation_text(client, movement, action)

    assert "proposes it" in text and "another supervisor confirms" in text


def test_force_fail_after_money_left_says_the_reservation_stays_held(
    client, supervisor, intervention_failed
):
    # given the withdrawal completed (money left the exchange), then its observation failed
    movement = intervention_failed()
    client.force_login(supervisor)

    text = confirmation_text(client, movement, "force_fail")

    assert "stays HELD" in text and "withdraw" in text
    assert "RELEASED" not in text


def test_cancel_before_any_money_left_says_the_reservation_is_released(
    client, supervisor, executing
):
    movement = executing()
    client.force_login(supervisor)

    text = confirmation_text(client, movement, "cancel")

    assert "RELEASED" in text
    assert "two-person" not in text

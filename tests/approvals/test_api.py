"""The API shows what approving takes and who approved; approve answers 200 each time."""

import pytest

from tests.api.conftest import client_for, movement_url

pytestmark = pytest.mark.django_db


def test_each_approval_answers_200_and_the_detail_shows_the_progress(
    make_movement, policy, alice, bob
):
    policy(approvals_required=2)
    movement = make_movement(amount="25000")

    first = client_for(alice).post(movement_url(movement.pk, "approve"))

    assert first.status_code == 200
    body = first.json()
    assert body["request_state"] == "PENDING_APPROVAL"
    assert body["approvals_required"] == 2
    assert [a["by"] for a in body["approvals"]] == ["alice"]
    assert body["approvals"][0]["at"]

    second = client_for(bob).post(movement_url(movement.pk, "approve"))

    assert second.status_code == 200
    assert second.json()["request_state"] == "APPROVED"
    assert [a["by"] for a in second.json()["approvals"]] == ["alice", "bob"]


def test_approving_twice_is_a_403_with_the_rule(make_movement, policy, alice):
    policy(approvals_required=2)
    movement = make_movement(amount="25000")
    client_for(alice).post(movement_url(movement.pk, "approve"))

    again = client_for(alice).post(movement_url(movement.pk, "approve"))

    assert again.status_code == 403
    assert "already approved" in again.json()["detail"]

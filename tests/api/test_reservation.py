"""The movement shows the reservation it holds against its hardcap (reservations app)."""

from tests.api.conftest import movement_url, post_json


def test_a_created_movement_shows_its_held_reservation(created, integration_client):
    body = integration_client.get(movement_url(created["id"])).json()

    assert body["reservation"] == {"state": "HELD", "amount": "100.5"}


def test_a_rejected_movement_shows_its_reservation_released(created, approver_client):
    response = post_json(approver_client, movement_url(created["id"], "reject"), {"reason": "no"})

    assert response.json()["reservation"] == {"state": "RELEASED", "amount": "100.5"}


def test_the_list_shows_each_reservation(created, integration_client):
    results = integration_client.get("/api/v1/movements/").json()["results"]

    assert [m["reservation"]["state"] for m in results] == ["HELD"]

"""What the movement page shows from the neighbouring apps: the reservation and the callback
deliveries."""

from callbacks.models import Subscription
from tests.admin.helpers import change_url, post_action


def test_the_header_shows_the_reservation_and_its_state(client, op, make_movement):
    movement = make_movement(amount="300")
    client.force_login(op)

    html = client.get(change_url(movement)).content.decode()

    reservation = html[html.index('id="qtg-reservation"') :]
    reservation = reservation[: reservation.index("</dd>")]
    assert "<b>HELD</b>" in reservation and "300.000000 USDC" in reservation


def test_the_page_lists_the_callback_deliveries_of_the_movement(
    client, op, supervisor, make_movement
):
    # given a receiver of approvals, and a movement another operator approved
    subscription = Subscription.objects.create(
        name="treasury-hook",
        url="https://hooks.example.com/qtg",
        event_types=["request_approved"],
    )
    movement = make_movement()
    client.force_login(supervisor)
    post_action(client, movement, "approve")
    client.force_login(op)

    # when the operator opens the movement
    response = client.get(change_url(movement))

    # then its delivery is listed, read-only
    html = response.content.decode()
    deliveries = html[html.index("Callback deliveries") :]
    assert "request_approved" in deliveries
    assert subscription.name in deliveries
    formsets = {f.opts.verbose_name_plural: f for f in response.context["inline_admin_formsets"]}
    delivery_inline = formsets["Callback deliveries (newest first)"]
    assert not delivery_inline.has_add_permission
    assert not delivery_inline.has_change_permission
    assert not delivery_inline.has_delete_permission

"""When an operator may settle a reservation by hand: the rule, written once (the shape of
``movements.policies``). ``reservation_settle`` raises the refusal; the reservation admin
offers its bulk actions and sorts the selected rows with it."""

from enum import StrEnum

from movements.public import TERMINAL_REQUEST_STATES, MovementRequest
from qtg.core.actors import Actor
from qtg.core.policies import Refusal, lacks_permission
from reservations.models import Reservation, ReservationState

SETTLE_PERMISSION = "reservations.settle_reservation"


class Rule(StrEnum):
    """The ``code`` of a refusal: which rule refused."""

    NOT_HELD = "not_held"
    MOVEMENT_NOT_FINISHED = "movement_not_finished"


def settle_permission_refusal(actor: Actor) -> Refusal | None:
    """The actor may not settle any reservation."""
    return lacks_permission(actor, SETTLE_PERMISSION)


def settle_refusal(
    *, actor: Actor, reservation: Reservation, movement: MovementRequest
) -> Refusal | None:
    """Settle (consume or release) by hand: the permission; the reservation is still HELD; its
    movement has finished (the post-transition table settles a running movement's)."""
    if refusal := settle_permission_refusal(actor):
        return refusal
    if reservation.state != ReservationState.HELD:
        return Refusal(
            Rule.NOT_HELD,
            f"the reservation is already {reservation.state}",
            {"current_state": reservation.state},
        )
    if movement.request_state not in TERMINAL_REQUEST_STATES:
        return Refusal(
            Rule.MOVEMENT_NOT_FINISHED,
            f"cannot settle while the movement is {movement.request_state}: only a finished "
            f"movement's reservation is settled by hand",
            {"current_state": movement.request_state},
        )
    return None

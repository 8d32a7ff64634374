from django.apps import AppConfig


class ReservationsConfig(AppConfig):
    name = "reservations"
    verbose_name = "Reservations"

    def ready(self) -> None:
        from movements.ports import ReservationLedger, provide_reservations
        from reservations.services import (
            reservation_consume,
            reservation_hold,
            reservation_release,
        )

        provide_reservations(
            ReservationLedger(
                hold=reservation_hold, consume=reservation_consume, release=reservation_release
            )
        )

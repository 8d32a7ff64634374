from django.apps import AppConfig


class ReservationsConfig(AppConfig):
    name = "reservations"
    verbose_name = "Reservations"

    def ready(self) -> None:
        from movements.ports import ReservationLedger, provide_reservations
        from reservations.services import ledger_consume, ledger_release, reservation_hold

        provide_reservations(
            ReservationLedger(hold=reservation_hold, consume=ledger_consume, release=ledger_release)
        )

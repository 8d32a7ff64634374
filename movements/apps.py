from django.apps import AppConfig


class MovementsConfig(AppConfig):
    name = "movements"
    verbose_name = "Movements"

    def ready(self) -> None:
        from movements import checks  # noqa: F401  (registers the system checks)
        from movements.services.execution import reaper
        from movements.services.writers import row_writer

        # The row writer is chosen once, at start-up: a bad QTG_ROW_WRITER fails here.
        row_writer()
        # Every worker process reaps expired leases on its own clock, not only when beat's
        # messages reach it.
        reaper.connect()

from django.apps import AppConfig


class MovementsConfig(AppConfig):
    name = "movements"
    verbose_name = "Movements"

    def ready(self) -> None:
        from movements.services.writers import row_writer

        # The row writer is chosen once, at start-up: a bad QTG_ROW_WRITER fails here.
        row_writer()

from django.apps import AppConfig


class MovementsConfig(AppConfig):
    name = "movements"
    verbose_name = "Movements"

    def ready(self) -> None:
        from movements import checks  # noqa: F401  (registers the system checks)

from django.apps import AppConfig


class MovementsConfig(AppConfig):
    name = "movements"
    verbose_name = "Movements"

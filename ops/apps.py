from django.apps import AppConfig


class OpsConfig(AppConfig):
    """Operability: health checks, metrics, the status command, logging and the production
    start. Above every other app: it reads them all and none of them imports it."""

    name = "ops"
    verbose_name = "Operations"

    def ready(self) -> None:
        from ops import heartbeats

        heartbeats.connect()

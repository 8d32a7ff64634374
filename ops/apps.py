import logging

from django.apps import AppConfig

logger = logging.getLogger("qtg.security")


class OpsConfig(AppConfig):
    """Operability: health checks, metrics, the status command, logging and the production
    start. Above every other app: it reads them all and none of them imports it."""

    name = "ops"
    verbose_name = "Operations"

    def ready(self) -> None:
        from django.conf import settings

        from ops import checks, heartbeats, task_metrics  # noqa: F401  (checks: the deploy check)
        from qtg.weakening import weakenings

        heartbeats.connect()
        task_metrics.connect()
        # Every process outside the demo says at start which protections are switched off.
        for weakened in weakenings(settings):
            logger.warning(
                "security weakened: %s (%s)",
                weakened["variable"],
                weakened["cost"],
                extra={"weakened": weakened["variable"]},
            )

from importlib import import_module
from importlib.util import find_spec

from django.apps import AppConfig

# The adapters, in the order they load; one whose package is absent is skipped.
ADAPTERS = ("venues.evm", "venues.cex", "venues.cctp", "venues.solana")


def installed_adapters() -> list[str]:
    return [name for name in ADAPTERS if find_spec(name) is not None]


class VenuesConfig(AppConfig):
    name = "venues"
    verbose_name = "Real venues"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from movements import interface
        from qtg.core.venues import provide_venues
        from venues import conf, local

        for adapter in installed_adapters():
            if find_spec(f"{adapter}.executors") is not None:
                import_module(f"{adapter}.executors")  # registers the adapter's executors
        # The accounts the reviewed configuration names are venues movements may name.
        provide_venues(conf.account_names())
        interface.provide_embedded_services(local.start_standins)

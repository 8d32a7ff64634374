from importlib import import_module
from importlib.util import find_spec

from django.apps import AppConfig

# The adapters, in the order they load; one whose package is absent is skipped.
ADAPTERS = ("venues.evm", "venues.cex", "venues.cctp", "venues.solana")


# The executors each adapter's ``executors`` module registers (all as the "venues" provider):
# declared at start-up so their names are known without importing web3, ccxt or solana; the
# module is imported the first time one of its executors is used. A test holds this table to
# what the modules register.
EXECUTORS = {
    "venues.evm.executors": ("evm_transfer", "evm_transfer_observe", "chain_tx_observe"),
    "venues.cex.executors": ("cex_withdraw", "cex_withdrawal_observe", "cex_deposit_observe"),
    "venues.cctp.executors": ("cctp_burn", "cctp_mint", "cctp_attestation_observe"),
    "venues.cctp.executors_v2": (
        "cctp_v2_burn",
        "cctp_v2_attestation_observe",
        "cctp_v2_mint",
        "cctp_v2_burn_final_observe",
    ),
    "venues.solana.executors": ("solana_transfer", "solana_transfer_observe"),
}
PROVIDER = "venues"


def installed_adapters() -> list[str]:
    return [name for name in ADAPTERS if find_spec(name) is not None]


class VenuesConfig(AppConfig):
    name = "venues"
    verbose_name = "Real venues"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from movements.executors.registry import registry
        from qtg.core.assets import provide_asset_decimals
        from qtg.core.venues import provide_venues
        from venues import conf

        for adapter in installed_adapters():
            # The adapter's chain family (address spelling, its chains.yaml parser, its
            # transaction fields, finality words, fees, calls, explorer), if it has one; and
            # the calls a protocol on a family registers with it (CCTP's burns and mints).
            for part in ("family", "calls"):
                if find_spec(f"{adapter}.{part}") is not None:
                    module = import_module(f"{adapter}.{part}")
                    if hasattr(module, "register"):
                        module.register()
        for adapter in installed_adapters():
            module = f"{adapter}.executors"
            for declared, names in EXECUTORS.items():
                if declared.startswith(adapter + ".") and find_spec(declared) is not None:
                    for name in names:
                        registry.declare(name, provider=PROVIDER, module=declared)
            if module not in EXECUTORS and find_spec(module) is not None:
                import_module(module)  # an adapter without a declaration registers now
        if find_spec("venues.evm") is not None:
            register_chain_fact_checks()
        # The accounts the reviewed configuration names are venues movements may name.
        provide_venues(conf.account_names(), details=conf.account_details())
        provide_asset_decimals(conf.asset_decimals())


def register_chain_fact_checks() -> None:
    """``manage.py check --deploy``: every configured token's decimals read from its chain
    and compared with the reviewed config (deploy-only: it talks to the chains; the EVM
    client is imported only when the check runs)."""
    from django.core import checks

    @checks.register(checks.Tags.compatibility, deploy=True)
    def token_decimals_match_the_chain(app_configs=None, **kwargs):
        from venues.evm.config import evm_chains
        from venues.evm.facts import check_chain_facts

        return [
            checks.Error(problem, id="venues.E025") for problem in check_chain_facts(evm_chains())
        ]

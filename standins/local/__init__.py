"""``QTG_VENUES=local``: the stand-ins run as child processes of ``make run``.

The one entry is ``python -m standins.local`` (what ``QTG_VENUES=local make run`` and ``make
run-local`` run): it hands :func:`start_standins` to movements' ``run_embedded`` through the
port for local services (``movements.ports.provide_embedded_services``) and runs that command,
so no product module imports the stand-ins.

Each real-venue adapter that has a stand-in has a launcher here (``standins.local.evm``,
``cex``, ``cctp``, ``solana``) with ``start(env, var_dir)``: it starts its stand-in (anvil, the
local exchange, ...), prepares it (deploys contracts, funds the demo accounts), writes the
configuration the product reads, adds the environment the web, worker and beat processes need
to ``env``, and returns the processes to stop at the end.
"""

import logging
import os
from importlib import import_module
from pathlib import Path
from subprocess import Popen
from typing import Any

from django.conf import settings

from qtg.core.assets import provide_asset_decimals
from qtg.core.venues import provide_venues
from venues import conf
from venues.apps import installed_adapters

log = logging.getLogger(__name__)

# adapter -> its stand-in's launcher; they start in the adapters' order (CCTP reuses the EVM
# adapter's devchain, Solana extends the chains file the others wrote).
LAUNCHERS = {
    "venues.evm": "standins.local.evm",
    "venues.cex": "standins.local.cex",
    "venues.cctp": "standins.local.cctp",
    "venues.solana": "standins.local.solana",
}


def start_standins(env: dict[str, str]) -> list[Popen[Any]]:
    """Start every installed adapter's stand-in when ``QTG_VENUES`` is ``local`` (nothing
    otherwise)."""
    if settings.QTG_VENUES != "local":
        return []
    var_dir = Path(settings.VAR_DIR) / "standins"
    var_dir.mkdir(parents=True, exist_ok=True)
    started: list[Popen[Any]] = []
    try:
        for adapter in installed_adapters():
            if adapter in LAUNCHERS:
                started.extend(import_module(LAUNCHERS[adapter]).start(env, var_dir))
    except BaseException:
        stop(started)
        raise
    # This process reads the configuration the stand-ins wrote too (the demo's movements are
    # created here; web, worker and beat get it in ``env``), and its accounts are venues.
    for variable in conf.FILES.values():
        if env.get(variable):
            os.environ[variable] = env[variable]
    provide_venues(conf.account_names(), details=conf.account_details())
    provide_asset_decimals(conf.asset_decimals())
    return started


def stop(processes: list[Popen[Any]]) -> None:
    for process in reversed(processes):
        if process.poll() is None:
            process.terminate()
    for process in processes:
        try:
            process.wait(timeout=10)
        except Exception:
            process.kill()

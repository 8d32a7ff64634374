"""``QTG_VENUES=local``: the local exchange (``python -m standins.exchange``) as a child
process of ``make run``, and the configuration that points the exchange executors at it.

The demo's exchange venues become accounts on it: ``sandbox-exchange-a`` and
``sandbox-exchange-c`` on its Binance, ``sandbox-exchange-b`` on its Upbit and
``sandbox-exchange-d`` on its Bithumb, each holding USDC, USDT and ETH. The stand-in's
courier plays the chain between them: a withdrawal is broadcast a few seconds after it was
accepted and credited to the account whose deposit address it names, so the demo's exchange
to exchange movements finish on their own (Upbit -> Bithumb: ``local-cex-2``). The
sandbox's fault parameters, ``params.sandbox``, mean nothing to a real exchange.
"""

import logging
import os
import secrets
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml
from django.conf import settings

from standins.processes import wait_listening

log = logging.getLogger(__name__)

# venue name -> (the stand-in's venue, env variable prefix)
DEMO_ACCOUNTS = {
    "sandbox-exchange-a": ("binance", "QTG_LOCAL_EXCHANGE_A"),
    "sandbox-exchange-b": ("upbit", "QTG_LOCAL_EXCHANGE_B"),
    "sandbox-exchange-c": ("binance", "QTG_LOCAL_EXCHANGE_C"),
    "sandbox-exchange-d": ("bithumb", "QTG_LOCAL_EXCHANGE_D"),
}
# What Bithumb asks of a withdrawal to another exchange (its travel-rule fields).
WITHDRAW_PARAMS = {
    "bithumb": {
        "exchange_name": "local",
        "receiver_type": "personal",
        "receiver_ko_name": "QTG",
        "receiver_en_name": "QTG",
    }
}
DEMO_BALANCES = {"USDC": "1000000", "USDT": "1000000", "ETH": "100"}
# Seconds the local chain takes to carry a withdrawal to its destination.
DELIVER_AFTER_SECONDS = 5.0
# How long the local exchange's histories may lag (it lags only when told to).
VISIBILITY_SECONDS = 10
STARTUP_TIMEOUT_SECONDS = 30


def standin_accounts() -> dict[str, dict[str, Any]]:
    """The local exchange's accounts file, with fresh keys for this run."""
    accounts: dict[str, dict[str, Any]] = {}
    for name, (kind, _) in DEMO_ACCOUNTS.items():
        accounts.setdefault(kind, {"accounts": {}})["accounts"][name] = {
            "api_key": secrets.token_hex(16),
            "secret": secrets.token_hex(32),
            "balances": dict(DEMO_BALANCES),
        }
    return accounts


def exchanges_config(base_url: str, standin: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """``exchanges.yaml`` for the local exchange at ``base_url``: secrets named by env var."""
    exchanges: dict[str, Any] = {}
    for name, (kind, prefix) in DEMO_ACCOUNTS.items():
        entry = exchanges.setdefault(
            f"local-{kind}",
            {"kind": kind, "api_url": f"{base_url}/{kind}", "timeout_seconds": 10, "accounts": {}},
        )
        entry["accounts"][name] = {
            "api_key": {"env": f"{prefix}_API_KEY"},
            "secret": {"env": f"{prefix}_SECRET"},
            "visibility_seconds": VISIBILITY_SECONDS,
            **({"withdraw_params": WITHDRAW_PARAMS[kind]} if kind in WITHDRAW_PARAMS else {}),
        }
    return {"version": 1, "exchanges": exchanges}


def credential_env(standin: dict[str, dict[str, Any]]) -> dict[str, str]:
    env = {}
    for name, (kind, prefix) in DEMO_ACCOUNTS.items():
        account = standin[kind]["accounts"][name]
        env[f"{prefix}_API_KEY"] = account["api_key"]
        env[f"{prefix}_SECRET"] = account["secret"]
    return env


def _private_file(path: Path, data: dict[str, Any]) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        yaml.safe_dump(data, handle, sort_keys=False)


def start(env: dict[str, str], var_dir: Path) -> list[subprocess.Popen[str]]:
    """Start the local exchange, fund the demo accounts, write the exchanges configuration
    into ``var_dir`` and point ``env`` (the web, worker and beat processes') at it."""
    standin = standin_accounts()
    accounts_file = var_dir / "local-exchange-accounts.yaml"
    _private_file(accounts_file, standin)
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "standins.exchange",
            "--port",
            "0",
            "--config",
            str(accounts_file),
            "--deliver-after",
            str(DELIVER_AFTER_SECONDS),
        ],
        cwd=str(settings.BASE_DIR),
        stdout=subprocess.PIPE,
        text=True,
    )
    base_url = wait_listening(process, what="the local exchange", timeout=STARTUP_TIMEOUT_SECONDS)
    config_file = var_dir / "exchanges.yaml"
    _private_file(config_file, exchanges_config(base_url, standin))
    env["QTG_EXCHANGES_CONFIG"] = str(config_file)
    env.update(credential_env(standin))
    log.warning("local exchange at %s (accounts: %s)", base_url, ", ".join(DEMO_ACCOUNTS))
    return [process]

"""Reviewed venue configuration: ``venues/chains.yaml`` and ``venues/exchanges.yaml``.

The files hold no secrets: an account names the environment variable or the file that holds
its key, and an RPC endpoint names the variable that holds its URL. ``QTG_CHAINS_CONFIG`` and
``QTG_EXCHANGES_CONFIG`` point elsewhere (the local stand-ins write their own, tests too).
Each adapter parses its own entries (``kind`` tells whose an entry is); this module only finds
and reads the files, and lists the account names movements may use as venues.
"""

import os
from functools import cache
from pathlib import Path
from typing import Any

import yaml
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

HERE = Path(__file__).resolve().parent
FILES = {"chains": "QTG_CHAINS_CONFIG", "exchanges": "QTG_EXCHANGES_CONFIG"}


def config_path(name: str) -> Path:
    """Where the ``name`` file ("chains" or "exchanges") is read from."""
    override = getattr(settings, FILES[name], "") or os.environ.get(FILES[name], "")
    return Path(override) if override else HERE / f"{name}.yaml"


@cache
def _read(path: Path, mtime: float) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise ImproperlyConfigured(f"venue configuration {path}: {exc}") from exc
    if not isinstance(data, dict):
        raise ImproperlyConfigured(f"venue configuration {path}: a mapping is expected")
    return data


def load(name: str) -> dict[str, Any]:
    """The parsed ``name`` file (re-read when it changes); empty when there is none."""
    path = config_path(name)
    if not path.exists():
        return {}
    return _read(path, path.stat().st_mtime)


def section(name: str, key: str) -> dict[str, Any]:
    """One top-level mapping of a file (``section("chains", "chains")``)."""
    value = load(name).get(key) or {}
    if not isinstance(value, dict):
        raise ImproperlyConfigured(f"{config_path(name)}: {key!r} must be a mapping")
    return value


def account_names() -> list[str]:
    """Every account name the configuration gives (``accounts:`` of each chain and exchange):
    the venue names a movement may use as its source or destination."""
    names: list[str] = []
    for file, key in (("chains", "chains"), ("exchanges", "exchanges")):
        for entry in section(file, key).values():
            accounts = (entry or {}).get("accounts") or {}
            if isinstance(accounts, dict):
                names.extend(str(account) for account in accounts)
    return names


def account_details() -> dict[str, dict[str, Any]]:
    """What the API's venue list says of each configured account: its kind, the chain or
    exchange it is on, and the assets it can carry (null: whatever the exchange holds)."""
    details: dict[str, dict[str, Any]] = {}
    for chain, entry in section("chains", "chains").items():
        entry = entry or {}
        native = (entry.get("native") or {}).get("symbol") or (
            "SOL" if entry.get("kind") == "solana" else "ETH"
        )
        tokens = [str(symbol) for symbol in (entry.get("tokens") or {})]
        for account in entry.get("accounts") or {}:
            details[str(account)] = {
                "kind": "chain_account",
                "chain": str(chain),
                "chain_kind": str(entry.get("kind") or ""),
                "exchange": None,
                "assets": sorted({str(native), *tokens}),
            }
    for exchange, entry in section("exchanges", "exchanges").items():
        entry = entry or {}
        for account in entry.get("accounts") or {}:
            details[str(account)] = {
                "kind": "exchange_account",
                "chain": None,
                "chain_kind": None,
                "exchange": str(exchange),
                "assets": None,
            }
    return details


def asset_decimals() -> dict[str, int]:
    """Each asset's decimals as the chains' entries give them (tokens and native coins; the
    console shows amounts with them, ``qtg.core.assets``)."""
    found: dict[str, int] = {}
    for entry in section("chains", "chains").values():
        entry = entry or {}
        native = entry.get("native") or {}
        if native.get("symbol") and native.get("decimals") is not None:
            found[str(native["symbol"])] = int(native["decimals"])
        for symbol, token in (entry.get("tokens") or {}).items():
            if isinstance(token, dict) and token.get("decimals") is not None:
                places = int(token["decimals"])
                found[str(symbol)] = max(places, found.get(str(symbol), 0))
    return found


def rpc_url(chain: str, variable: str) -> str:
    """A chain's RPC URL, from the environment variable its entry names."""
    url = os.environ.get(variable, "")
    if not url:
        raise ImproperlyConfigured(
            f"chain {chain}: environment variable {variable} (its RPC URL) is empty"
        )
    return url


def secret(reference: dict[str, Any], *, what: str) -> str:
    """The secret a config entry points at: ``{env: NAME}`` or ``{file: PATH}``; never logged,
    never stored. A missing one is a configuration error naming where it was looked for."""
    if "env" in reference:
        value = os.environ.get(str(reference["env"]), "")
        if not value:
            raise ImproperlyConfigured(f"{what}: environment variable {reference['env']} is empty")
        return value
    if "file" in reference:
        path = Path(str(reference["file"]))
        try:
            return path.read_text().strip()
        except OSError as exc:
            raise ImproperlyConfigured(f"{what}: cannot read {path}: {exc.strerror}") from None
    raise ImproperlyConfigured(f"{what}: name an env variable or a file ({{env: ...}})")

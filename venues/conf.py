"""Reviewed venue configuration: ``venues/chains.yaml`` and ``venues/exchanges.yaml``.

The files hold no secrets: an account names the environment variable or the file that holds
its key, and an RPC endpoint names the variable that holds its URL. ``QTG_CHAINS_CONFIG`` and
``QTG_EXCHANGES_CONFIG`` point elsewhere (the local stand-ins write their own, tests too).
Each chain entry is parsed by its family (``kind`` names it; the family registers its parser
in ``qtg.core.chains``), once per version of the file: ``chain(name)`` and ``chains(kind)``
hand out the parsed chain; a changed file is read and parsed again. This module also lists
the account names movements may use as venues and reads each chain's explorer link template.
"""

import os
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any, TypeVar

import yaml
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

T = TypeVar("T")
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


def _version(name: str) -> tuple[str, float]:
    path = config_path(name)
    return (str(path), path.stat().st_mtime if path.exists() else -1.0)


# (what, file version) -> the parsed value: each thing is parsed once per version of its file.
_parsed: dict[tuple[str, tuple[str, float]], Any] = {}


def parsed(name: str, what: str, parse: Callable[[], T]) -> T:
    """``parse()`` (which reads file ``name``) run once per version of that file; an error is
    raised again at each use, never kept."""
    key = (what, _version(name))
    if key not in _parsed:
        value = parse()
        for old in [k for k in _parsed if k[0] == what and k[1][0] == key[1][0]]:
            del _parsed[old]  # an older version of the same file
        _parsed[key] = value
    return _parsed[key]


def chain(name: str) -> Any:
    """Chain ``name`` parsed by its family (``LookupError``: no such chain, or no family of its
    kind is registered)."""
    from qtg.core.chains import family

    entry = section("chains", "chains").get(name)
    if not isinstance(entry, dict):
        raise LookupError(f"no chain {name!r} is configured")
    found = family(str(entry.get("kind") or ""))
    return parsed("chains", f"chain:{name}", lambda: found.parse(str(name), entry))


def chains(kind: str) -> dict[str, Any]:
    """Every configured chain of family ``kind``, parsed (once per version of the file)."""
    return {
        str(name): chain(str(name))
        for name, entry in section("chains", "chains").items()
        if isinstance(entry, dict) and entry.get("kind") == kind
    }


def chain_kind(name: str) -> str:
    """The family of configured chain ``name`` ("" when it is not configured)."""
    entry = section("chains", "chains").get(name)
    return str(entry.get("kind") or "") if isinstance(entry, dict) else ""


def explorer_tx_url(name: str) -> str:
    """Chain ``name``'s reviewed explorer link template (``explorer_tx_url``, ``{tx}`` the hash
    or signature); "" when it has none or it is malformed (a link is never guessed)."""
    entry = section("chains", "chains").get(name)
    value = entry.get("explorer_tx_url") if isinstance(entry, dict) else None
    if not isinstance(value, str) or "{tx}" not in value:
        return ""
    return value if value.startswith(("https://", "http://")) else ""


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
        native = (entry.get("native") or {}).get("symbol") or _native_symbol(entry.get("kind"))
        tokens = [str(symbol) for symbol in (entry.get("tokens") or {})]
        for account in entry.get("accounts") or {}:
            details[str(account)] = {
                "kind": "chain_account",
                "chain": str(chain),
                "chain_kind": str(entry.get("kind") or ""),
                "exchange": None,
                "assets": sorted({str(native), *tokens} - {""}),
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
    from qtg.core.chains import families

    found: dict[str, int] = {}
    for entry in section("chains", "chains").values():
        entry = entry or {}
        family = families().get(str(entry.get("kind") or ""))
        symbol, places = family.native if family is not None else ("", 0)
        native = entry.get("native") or {}
        symbol = str(native.get("symbol") or symbol)
        if symbol:
            found[symbol] = int(native.get("decimals", places))
        for symbol, token in (entry.get("tokens") or {}).items():
            if isinstance(token, dict) and token.get("decimals") is not None:
                places = int(token["decimals"])
                found[str(symbol)] = max(places, found.get(str(symbol), 0))
    return found


def _native_symbol(kind: Any) -> str:
    from qtg.core.chains import families

    found = families().get(str(kind or ""))
    return found.native[0] if found is not None else ""


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

"""The local exchange's accounts file: which venues run, their accounts, keys and balances.

    binance:
      accounts:
        main:
          api_key: ...          # optional: generated when left out
          secret: ...           # optional: generated when left out
          balances: {USDT: "10000", ETH: "5"}
          whitelist: null       # or a list of addresses withdrawals may go to
          deposit_addresses: {"USDT/ETH": "0x..."}   # optional; derived when left out
      coins: {...}              # optional; replaces the default coin table (ledger.DEFAULT_COINS)
    upbit:
      accounts: {...}
    bithumb:
      accounts: {...}

The keys are the stand-in's own test credentials, not real ones.
"""

from __future__ import annotations

import copy
import json
import secrets
from pathlib import Path

import yaml

from . import binance, bithumb, upbit
from .ledger import DEFAULT_COINS, AccountSpec, build_coins
from .wire import Venue

VENUES = {
    "binance": (binance.BinanceVenue, binance.make_books),
    "upbit": (upbit.UpbitVenue, upbit.make_books),
    "bithumb": (bithumb.BithumbVenue, bithumb.make_books),
}

DEFAULT_BALANCES = {"USDT": "10000", "USDC": "10000", "ETH": "10", "BTC": "1"}


def default_config() -> dict:
    return {name: {"accounts": {"main": {"balances": dict(DEFAULT_BALANCES)}}} for name in VENUES}


def resolve_config(source: dict | str | Path | None) -> dict:
    """The config with every account's keys filled in (generated where missing)."""
    if source is None:
        raw = default_config()
    elif isinstance(source, dict):
        raw = copy.deepcopy(source)
    else:
        text = Path(source).read_text()
        raw = json.loads(text) if str(source).endswith(".json") else yaml.safe_load(text)
    unknown = set(raw) - set(VENUES)
    if unknown:
        raise ValueError(f"unknown venues in exchange config: {sorted(unknown)}")
    for venue in raw.values():
        for account in (venue.get("accounts") or {}).values():
            account.setdefault("api_key", secrets.token_hex(16))
            account.setdefault("secret", secrets.token_hex(32))
    return raw


def build_venues(resolved: dict) -> dict[str, Venue]:
    venues = {}
    for name, spec in resolved.items():
        venue_class, make_books = VENUES[name]
        coins = build_coins(spec.get("coins") or DEFAULT_COINS)
        accounts = [
            AccountSpec(name=account_name, **(account or {})).build()
            for account_name, account in (spec.get("accounts") or {}).items()
        ]
        venues[name] = venue_class(make_books(coins, accounts))
    return venues

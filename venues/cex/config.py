"""The exchange accounts of ``venues/exchanges.yaml`` (or ``QTG_EXCHANGES_CONFIG``)::

    exchanges:
      binance-main:                      # a name of our own
        kind: binance                    # binance | upbit | bithumb (venues/cex/exchanges/)
        api_url: http://127.0.0.1:8765   # optional: every ccxt URL moved onto it (stand-in)
        networks: {ethereum: ETH}        # optional: template network -> the exchange's id
        rate_limit: {per_second: 8, burst: 8}      # optional: the credential's shared budget
        timeout_seconds: 10              # optional: a request unanswered this long timed out
        accounts:
          treasury-binance:              # the venue name movements use
            api_key: {env: QTG_BINANCE_TREASURY_KEY}
            secret: {file: /run/secrets/binance-treasury}
            visibility_seconds: 120      # how long its history may lag behind a withdrawal
            deposit_addresses: {ethereum: "0x..."}  # optional: else asked of the exchange
            withdraw_params: {}          # optional: sent with every withdrawal (Bithumb's
                                         # travel-rule fields: exchange_name, receiver_...)
            max_skew_seconds: 5          # optional: refuse to withdraw past this clock skew

Keys and secrets are read from where the entry names them when a client is built, kept in
memory only, and never logged (``Credentials`` hides them from ``repr``).
"""

import hashlib
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from django.core.exceptions import ImproperlyConfigured

from qtg.core.venues import canonical_venue
from venues import conf
from venues.cex.exchanges import KINDS, Dialect, dialect

# The chain names of our templates and the network ids both exchanges use for them.
DEFAULT_NETWORKS = {
    "ethereum": "ETH",
    "eth": "ETH",
    "tron": "TRX",
    "bitcoin": "BTC",
}
DEFAULT_RATE = {"per_second": 8.0, "burst": 8.0}
# How far the exchange's clock may be from ours before withdrawals are held back.
DEFAULT_MAX_SKEW_SECONDS = 5.0


@dataclass(frozen=True)
class Credentials:
    api_key: str = field(repr=False)
    secret: str = field(repr=False)

    @property
    def fingerprint(self) -> str:
        """Names the credential without revealing it (the rate-limit bucket's key)."""
        return hashlib.sha256(self.api_key.encode()).hexdigest()[:16]

    def __repr__(self) -> str:
        return f"Credentials(api_key=<{self.fingerprint}>, secret=<hidden>)"


@dataclass(frozen=True)
class ExchangeAccount:
    name: str  # the venue name (canonical)
    exchange: str  # the entry's name
    kind: str
    api_url: str
    networks: dict[str, str]
    rate_per_second: float
    rate_burst: float
    visibility_seconds: float
    timeout_seconds: float
    deposit_addresses: dict[str, str]
    withdraw_params: dict[str, Any]
    max_skew_seconds: float
    api_key_ref: dict[str, Any] = field(repr=False)
    secret_ref: dict[str, Any] = field(repr=False)

    @property
    def dialect(self) -> Dialect:
        """What this account's exchange can prove and how it is spoken to."""
        return dialect(self.kind)

    @property
    def fee_deducted(self) -> bool:
        """Binance sends the amount asked for less the fee; Upbit and Bithumb charge the fee on
        top and send the amount asked for."""
        return self.dialect.fee_deducted

    def network_id(self, network: str) -> str:
        """The exchange's id of a template's network name (``ethereum`` -> ``ETH``)."""
        key = (network or "").strip().lower()
        found = self.networks.get(key) or DEFAULT_NETWORKS.get(key)
        if not found:
            raise LookupError(f"exchange {self.exchange} has no network {network!r} configured")
        return found

    def credentials(self) -> Credentials:
        what = f"exchange account {self.name}"
        return Credentials(
            api_key=conf.secret(self.api_key_ref, what=f"{what} api_key"),
            secret=conf.secret(self.secret_ref, what=f"{what} secret"),
        )


def _mapping(value: Any, where: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ImproperlyConfigured(f"{conf.config_path('exchanges')}: {where} must be a mapping")
    return value


def accounts() -> dict[str, ExchangeAccount]:
    """Every configured exchange account, by canonical venue name."""
    found: dict[str, ExchangeAccount] = {}
    for exchange, entry in conf.section("exchanges", "exchanges").items():
        entry = _mapping(entry, f"exchange {exchange}")
        kind = str(entry.get("kind", "")).lower()
        if kind not in KINDS:
            raise ImproperlyConfigured(
                f"exchange {exchange}: kind must be one of {', '.join(KINDS)} (got {kind!r})"
            )
        rate = {**DEFAULT_RATE, **_mapping(entry.get("rate_limit"), f"{exchange}.rate_limit")}
        networks = {
            str(k).lower(): str(v)
            for k, v in _mapping(entry.get("networks"), f"{exchange}.networks").items()
        }
        for name, spec in _mapping(entry.get("accounts"), f"{exchange}.accounts").items():
            spec = _mapping(spec, f"{exchange}.accounts.{name}")
            for ref in ("api_key", "secret"):
                if not isinstance(spec.get(ref), dict):
                    raise ImproperlyConfigured(
                        f"exchange account {name}: {ref} must name an env variable or a file "
                        f"({{env: NAME}} or {{file: PATH}}), never the value itself"
                    )
            addresses = _mapping(spec.get("deposit_addresses"), f"{name}.deposit_addresses")
            found[canonical_venue(str(name))] = ExchangeAccount(
                name=canonical_venue(str(name)),
                exchange=str(exchange),
                kind=kind,
                api_url=str(entry.get("api_url") or ""),
                networks=networks,
                rate_per_second=float(rate["per_second"]),
                rate_burst=float(rate["burst"]),
                visibility_seconds=float(spec.get("visibility_seconds", 60)),
                timeout_seconds=float(entry.get("timeout_seconds", 10)),
                deposit_addresses={str(k).lower(): str(v) for k, v in addresses.items()},
                withdraw_params=dict(
                    _mapping(spec.get("withdraw_params"), f"{name}.withdraw_params")
                ),
                max_skew_seconds=float(spec.get("max_skew_seconds", DEFAULT_MAX_SKEW_SECONDS)),
                api_key_ref=spec["api_key"],
                secret_ref=spec["secret"],
            )
    return found


def account(name: str) -> ExchangeAccount:
    """The configured exchange account a movement names as a venue."""
    try:
        return accounts()[canonical_venue(name)]
    except KeyError:
        raise LookupError(f"no exchange account {name!r} in the exchanges configuration") from None


def is_account(name: str) -> bool:
    return canonical_venue(name) in accounts()


def plain(amount: Decimal) -> str:
    """A decimal as the exchanges take it: no exponent, no trailing zeros."""
    text = format(amount.normalize(), "f")
    return text

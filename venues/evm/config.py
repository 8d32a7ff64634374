"""The EVM chains of the reviewed chain configuration (``kind: evm`` entries of
``venues/chains.yaml``, or the file ``QTG_CHAINS_CONFIG`` names):

    chains:
      ethereum:
        kind: evm
        chain_id: 1
        rpc_url_env: QTG_ETHEREUM_RPC_URL      # the URL is in this env variable (primary:
                                               # sends and reads go there)
        rpc_endpoints: [QTG_ETHEREUM_RPC_URL_B]  # optional: more endpoints (their env
                                               # variables), asked before any absence is
                                               # concluded: a receipt at any of them is mined
        max_head_lag_blocks: 3                 # optional (3): an endpoint whose head is more
                                               # behind the highest is lagging, not asked
        finality: tag                          # FINALIZED at the node's `finalized` block
        # finality: {depth: 64, reason: "..."}     for a chain whose tag is not trusted
        # finality: {tag: true, depth: 12, reason: "..."}   both (the later of the two)
        # (a legacy `confirmations: N` without `finality` means tag + depth N)
        post_final_watch: 3600                 # optional: seconds a FINALIZED transaction
                                               # is still looked at (default 0)
        block_seconds: 12
        replace_after_seconds: 180             # PENDING longer than this: fee bump
        max_fee_gwei: 300                      # fee cap: no bump above it (attention instead)
        priority_fee_gwei: 1.5                 # optional (default 1)
        fee_bump_percent: 12.5                 # optional (default 12.5, at least 10)
        broadcast_window_seconds: 60           # optional: not seen by then -> re-broadcast
        unsigned_release_seconds: 120          # optional: a nonce held unsigned that long by a
                                               # live node, with later nonces waiting, is filled
        rpc_timeout_seconds: 10                # optional
        native: {symbol: ETH, decimals: 18}    # optional (default ETH, 18)
        explorer_tx_url: "https://etherscan.io/tx/{tx}"  # optional: the console's link
        tokens:
          USDC: {address: "0xA0b8...", decimals: 6}
        accounts:
          treasury:
            address: "0x..."
            key: {keystore: /etc/qtg/treasury.json, password_env: TREASURY_KEY_PASSWORD}

Amounts convert exactly with the asset's decimals; a finer amount is refused.
"""

from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any

from django.core.exceptions import ImproperlyConfigured

from venues import conf

GWEI = 10**9
MIN_BUMP_PERCENT = Decimal(10)


@dataclass(frozen=True)
class Asset:
    symbol: str
    decimals: int
    address: str = ""  # the ERC-20 contract; empty for the native coin

    @property
    def is_native(self) -> bool:
        return not self.address

    def to_base_units(self, amount: Decimal) -> int:
        """``amount`` in the asset's smallest unit, exactly; ``ValueError`` if it is finer."""
        scaled = Decimal(amount).scaleb(self.decimals)
        if scaled != scaled.to_integral_value():
            raise ValueError(
                f"{amount} {self.symbol} has more decimals than the token's {self.decimals}"
            )
        return int(scaled)

    def from_base_units(self, units: int) -> Decimal:
        return Decimal(units).scaleb(-self.decimals)


@dataclass(frozen=True)
class Finality:
    """When a transaction in block ``number`` is final on a chain, by reviewed policy: at the
    chain's own ``finalized`` block (``tag``), at a depth (``depth``: head - number + 1 >=
    depth, with the ``reason`` the chain's tag is not trusted), or both."""

    tag: bool
    depth: int  # 0: no depth required
    reason: str = ""

    def reached(self, *, number: int, head: int, finalized: int | None) -> bool:
        if self.tag and (finalized is None or number > finalized):
            return False
        return not self.depth or head - number + 1 >= self.depth

    def describe(self) -> str:
        parts = (["the finalized block"] if self.tag else []) + (
            [f"{self.depth} confirmations"] if self.depth else []
        )
        return " and ".join(parts)


def parse_finality(entry: dict[str, Any], what: str) -> Finality:
    """``finality: tag`` | ``{depth: N, reason}`` | ``{tag: true, depth: N, reason}``; absent:
    the legacy ``confirmations: N`` as tag + depth N, or ``tag`` alone."""
    value = entry.get("finality")
    if value is None:
        if "confirmations" in entry:
            depth = _int(entry, "confirmations", what, minimum=1)
            return Finality(True, depth, "confirmations: the finalized block and this depth")
        return Finality(True, 0)
    if value == "tag":
        return Finality(True, 0)
    if not isinstance(value, dict) or set(value) - {"tag", "depth", "reason"}:
        raise ImproperlyConfigured(
            f"{what}: finality must be 'tag', {{depth: N, reason: ...}} or "
            f"{{tag: true, depth: N, reason: ...}} (got {value!r})"
        )
    tag = value.get("tag", False)
    if not isinstance(tag, bool):
        raise ImproperlyConfigured(f"{what}: finality tag must be true or false")
    depth = _int(value, "depth", f"{what} finality", minimum=1) if "depth" in value else 0
    reason = str(value.get("reason") or "").strip()
    if not depth and not tag:
        raise ImproperlyConfigured(f"{what}: finality needs the tag, a depth, or both")
    if depth and not reason:
        raise ImproperlyConfigured(
            f"{what}: a finality depth needs a reason (why the chain's finalized tag is not enough)"
        )
    return Finality(tag, depth, reason)


@dataclass(frozen=True)
class Account:
    name: str
    address: str
    key: dict[str, Any] = field(default_factory=dict, repr=False)


@dataclass(frozen=True)
class EvmChain:
    name: str
    chain_id: int
    rpc_url_env: str
    finality: Finality
    post_final_watch: float  # seconds a FINALIZED transaction is still looked at
    block_seconds: float
    replace_after_seconds: float
    max_fee_wei: int
    priority_fee_wei: int
    fee_bump_percent: Decimal
    broadcast_window_seconds: float
    # A live node holding a nonce unsigned (CREATED) longer than this while later nonces of
    # the sender wait: the nonce is filled and the node takes a new one when it signs.
    unsigned_release_seconds: float
    rpc_timeout_seconds: float
    native: Asset
    tokens: dict[str, Asset]
    accounts: dict[str, Account]
    # The other endpoints' URL variables (the primary is ``rpc_url_env``) and how far behind
    # the highest head an endpoint may be before it is lagging (not asked for conclusions).
    rpc_endpoints: tuple[str, ...] = ()
    max_head_lag_blocks: int = 3

    @property
    def endpoint_envs(self) -> tuple[str, ...]:
        """Every endpoint's URL variable, the primary first."""
        return (self.rpc_url_env, *self.rpc_endpoints)

    @property
    def confirmations(self) -> int:
        """The depth the finality policy requires (0: the finalized tag alone)."""
        return self.finality.depth

    @property
    def rpc_url(self) -> str:
        return conf.rpc_url(self.name, self.rpc_url_env)

    def asset(self, symbol: str) -> Asset:
        if symbol == self.native.symbol:
            return self.native
        try:
            return self.tokens[symbol]
        except KeyError:
            raise LookupError(f"chain {self.name} has no token {symbol!r} configured") from None

    def account(self, name: str) -> Account:
        try:
            return self.accounts[name]
        except KeyError:
            raise LookupError(f"chain {self.name} has no account {name!r} configured") from None

    def address_of(self, name_or_address: str) -> str:
        """A configured account's address, or the address itself (checksummed)."""
        from venues.ethlib import Web3

        if name_or_address in self.accounts:
            return self.accounts[name_or_address].address
        if Web3.is_address(name_or_address):
            return Web3.to_checksum_address(name_or_address)
        raise LookupError(
            f"{name_or_address!r} is neither an account of chain {self.name} nor an address"
        )

    def bumped(self, wei: int) -> int:
        """A fee raised by the replacement rule (at least 10 %, rounded up)."""
        raised = Decimal(wei) * (100 + self.fee_bump_percent) / 100
        return int(raised.to_integral_value(rounding="ROUND_CEILING"))


def _decimal(entry: dict[str, Any], key: str, what: str, default: Any = None) -> Decimal:
    value = entry.get(key, default)
    try:
        number = Decimal(str(value))
    except (InvalidOperation, ValueError):
        raise ImproperlyConfigured(f"{what}: {key} must be a number (got {value!r})") from None
    if not number.is_finite() or number < 0:
        raise ImproperlyConfigured(f"{what}: {key} must be a non-negative number")
    return number


def _int(entry: dict[str, Any], key: str, what: str, *, minimum: int = 0) -> int:
    value = entry.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ImproperlyConfigured(f"{what}: {key} must be an integer >= {minimum}")
    return value


def _asset(symbol: str, entry: Any, what: str) -> Asset:
    from venues.ethlib import Web3

    if not isinstance(entry, dict):
        raise ImproperlyConfigured(f"{what}: token {symbol} must be a mapping")
    decimals = _int(entry, "decimals", f"{what} token {symbol}")
    address = str(entry.get("address") or "")
    if address and not Web3.is_address(address):
        raise ImproperlyConfigured(f"{what}: token {symbol} address {address!r} is not an address")
    return Asset(str(symbol), decimals, Web3.to_checksum_address(address) if address else "")


def parse_chain(name: str, entry: dict[str, Any]) -> EvmChain:
    """One ``kind: evm`` entry, validated: nothing runs on a half-understood chain."""
    from venues.ethlib import Web3

    what = f"chain {name}"
    if not isinstance(entry.get("rpc_url_env"), str) or not entry["rpc_url_env"]:
        raise ImproperlyConfigured(f"{what}: rpc_url_env must name an environment variable")
    block_seconds = float(_decimal(entry, "block_seconds", what))
    if block_seconds <= 0:
        raise ImproperlyConfigured(f"{what}: block_seconds must be positive")
    bump = _decimal(entry, "fee_bump_percent", what, "12.5")
    if bump < MIN_BUMP_PERCENT:
        raise ImproperlyConfigured(f"{what}: fee_bump_percent must be at least {MIN_BUMP_PERCENT}")
    native = entry.get("native") or {"symbol": "ETH", "decimals": 18}
    more = entry.get("rpc_endpoints") or []
    if not isinstance(more, list) or not all(isinstance(v, str) and v for v in more):
        raise ImproperlyConfigured(
            f"{what}: rpc_endpoints must be a list of environment variable names"
        )
    if len(set(more) | {entry["rpc_url_env"]}) != len(more) + 1:
        raise ImproperlyConfigured(f"{what}: an RPC endpoint is listed twice")
    accounts: dict[str, Account] = {}
    for account_name, account in (entry.get("accounts") or {}).items():
        if not isinstance(account, dict) or not Web3.is_address(account.get("address") or ""):
            raise ImproperlyConfigured(f"{what}: account {account_name} needs an 'address'")
        accounts[str(account_name)] = Account(
            str(account_name),
            Web3.to_checksum_address(account["address"]),
            dict(account.get("key") or {}),
        )
    return EvmChain(
        name=name,
        chain_id=_int(entry, "chain_id", what, minimum=1),
        rpc_url_env=entry["rpc_url_env"],
        finality=parse_finality(entry, what),
        post_final_watch=float(_decimal(entry, "post_final_watch", what, 0)),
        block_seconds=block_seconds,
        replace_after_seconds=float(_decimal(entry, "replace_after_seconds", what)),
        max_fee_wei=int(_decimal(entry, "max_fee_gwei", what) * GWEI),
        priority_fee_wei=int(_decimal(entry, "priority_fee_gwei", what, 1) * GWEI),
        fee_bump_percent=bump,
        broadcast_window_seconds=float(
            _decimal(entry, "broadcast_window_seconds", what, max(5.0, 3 * block_seconds))
        ),
        unsigned_release_seconds=float(_decimal(entry, "unsigned_release_seconds", what, 120)),
        rpc_timeout_seconds=float(_decimal(entry, "rpc_timeout_seconds", what, 10)),
        native=_asset(str(native.get("symbol", "ETH")), {**native, "address": ""}, what),
        tokens={
            str(symbol): _asset(symbol, token, what)
            for symbol, token in (entry.get("tokens") or {}).items()
        },
        accounts=accounts,
        rpc_endpoints=tuple(more),
        max_head_lag_blocks=(
            _int(entry, "max_head_lag_blocks", what) if "max_head_lag_blocks" in entry else 3
        ),
    )


def evm_chains() -> dict[str, EvmChain]:
    """Every ``kind: evm`` chain of the configuration (parsed once per version of the file)."""
    return conf.chains("evm")


def evm_chain(name: str) -> EvmChain:
    """One configured EVM chain; ``LookupError`` if there is none by that name."""
    if conf.chain_kind(name) != "evm":
        raise LookupError(f"no EVM chain {name!r} is configured")
    return conf.chain(name)

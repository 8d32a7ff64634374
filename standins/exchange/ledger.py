"""The local exchange's books: accounts, coins, withdrawals, deposits, faults and rate limits.

Venue-neutral and thread-safe (one lock per venue). The venue modules (binance.py, upbit.py)
turn these records and refusals into each exchange's own wire format.
"""

from __future__ import annotations

import hashlib
import math
import re
import secrets
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal, InvalidOperation

# Unified withdrawal statuses; each venue maps them to its own codes.
PENDING = "pending"
PROCESSING = "processing"
COMPLETED = "completed"
FAILED = "failed"
REJECTED = "rejected"
CANCELED = "canceled"
WITHDRAWAL_STATUSES = (PENDING, PROCESSING, COMPLETED, FAILED, REJECTED, CANCELED)
# Statuses in which the exchange gives the money back to the account.
REFUNDED_STATUSES = (FAILED, REJECTED, CANCELED)
DEPOSIT_STATUSES = (PENDING, COMPLETED)

# How the withdrawal fee is charged.
FEE_DEDUCTED = "deducted"  # the fee comes out of the amount asked for (Binance)
FEE_ON_TOP = "on_top"  # the fee is charged on top of the amount asked for (Upbit)

EVM_ADDRESS = r"^(0x)[0-9A-Fa-f]{40}$"
TRON_ADDRESS = r"^T[1-9A-HJ-NP-Za-km-z]{33}$"
BITCOIN_ADDRESS = r"^(bc1|[13])[a-zA-HJ-NP-Z0-9]{25,62}$"

DEFAULT_COINS: dict[str, dict] = {
    "USDT": {
        "name": "TetherUS",
        "networks": {
            "ETH": {"name": "Ethereum (ERC20)", "fee": "1", "min": "2", "regex": EVM_ADDRESS},
            "TRX": {"name": "Tron (TRC20)", "fee": "1", "min": "2", "regex": TRON_ADDRESS},
        },
    },
    "USDC": {
        "name": "USD Coin",
        "networks": {
            "ETH": {"name": "Ethereum (ERC20)", "fee": "1", "min": "2", "regex": EVM_ADDRESS},
        },
    },
    "ETH": {
        "name": "Ethereum",
        "networks": {
            "ETH": {
                "name": "Ethereum (ERC20)",
                "fee": "0.001",
                "min": "0.002",
                "regex": EVM_ADDRESS,
            }
        },
    },
    "BTC": {
        "name": "Bitcoin",
        "networks": {
            "BTC": {"name": "Bitcoin", "fee": "0.0002", "min": "0.001", "regex": BITCOIN_ADDRESS}
        },
    },
}


class Refusal(Exception):
    """The exchange refuses a request; `reason` is venue-neutral, each venue words it."""

    def __init__(self, reason: str, **details):
        super().__init__(reason)
        self.reason = reason
        self.details = details


def to_decimal(value, what: str = "amount") -> Decimal:
    """Parse an amount sent on the wire (string or number token) without float rounding."""
    try:
        result = Decimal(str(value))
    except (InvalidOperation, ValueError) as exc:
        raise Refusal("malformed", param=what) from exc
    if not result.is_finite():
        raise Refusal("malformed", param=what)
    return result


def plain(amount: Decimal) -> str:
    """A decimal as exchanges print it: no exponent."""
    return format(amount, "f")


def utcnow() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class Network:
    id: str
    name: str
    withdraw_fee: Decimal
    withdraw_min: Decimal
    address_regex: str
    is_default: bool
    # Decimal places a withdrawal amount may have on this network.
    decimals: int = 8


@dataclass(frozen=True)
class Coin:
    code: str
    name: str
    networks: dict[str, Network]

    def network(self, network_id: str | None) -> Network:
        if network_id is None:
            return next(n for n in self.networks.values() if n.is_default)
        try:
            return self.networks[network_id]
        except KeyError:
            raise Refusal("unknown_network", coin=self.code, network=network_id) from None


def build_coins(spec: dict[str, dict]) -> dict[str, Coin]:
    coins = {}
    for code, coin in spec.items():
        networks = {}
        for index, (network_id, net) in enumerate(coin["networks"].items()):
            networks[network_id] = Network(
                id=network_id,
                name=net.get("name", network_id),
                withdraw_fee=Decimal(str(net.get("fee", "0"))),
                withdraw_min=Decimal(str(net.get("min", "0"))),
                address_regex=net.get("regex", ".+"),
                is_default=bool(net.get("default", index == 0)),
                decimals=int(net.get("decimals", 8)),
            )
        coins[code] = Coin(code=code, name=coin.get("name", code), networks=networks)
    return coins


@dataclass
class Account:
    name: str
    api_key: str
    secret: str
    balances: dict[str, Decimal]
    # Addresses withdrawals may go to; None means the account has no whitelist switched on.
    whitelist: set[str] | None
    deposit_addresses: dict[str, str]

    def deposit_address(self, venue: str, coin: str, network: Network) -> str:
        configured = self.deposit_addresses.get(
            f"{coin}/{network.id}"
        ) or self.deposit_addresses.get(network.id)
        if configured:
            return configured
        digest = hashlib.sha256(f"{venue}/{self.name}/{network.id}".encode()).hexdigest()
        return "0x" + digest[:40]


@dataclass
class Withdrawal:
    id: str
    account: str
    coin: str
    network: str
    address: str
    tag: str | None
    amount: Decimal  # as asked for by the client
    fee: Decimal
    sent: Decimal  # what leaves on chain
    debited: Decimal  # what left the balance
    client_id: str | None
    status: str
    txid: str | None
    created_at: datetime
    visible_at: datetime
    completed_at: datetime | None = None

    def as_dict(self) -> dict:
        return {
            "id": self.id,
            "account": self.account,
            "coin": self.coin,
            "network": self.network,
            "address": self.address,
            "tag": self.tag,
            "amount": plain(self.amount),
            "fee": plain(self.fee),
            "sent": plain(self.sent),
            "debited": plain(self.debited),
            "client_id": self.client_id,
            "status": self.status,
            "txid": self.txid,
            "created_at": self.created_at.isoformat(),
            "visible_at": self.visible_at.isoformat(),
            "completed_at": self.completed_at.isoformat() if self.completed_at else None,
        }


@dataclass
class Deposit:
    id: str
    account: str
    coin: str
    network: str
    address: str
    tag: str | None
    amount: Decimal
    txid: str
    status: str
    created_at: datetime
    completed_at: datetime | None = None

    def as_dict(self) -> dict:
        return {
            "id": self.id,
            "account": self.account,
            "coin": self.coin,
            "network": self.network,
            "address": self.address,
            "tag": self.tag,
            "amount": plain(self.amount),
            "txid": self.txid,
            "status": self.status,
            "created_at": self.created_at.isoformat(),
            "completed_at": self.completed_at.isoformat() if self.completed_at else None,
        }


FAULT_KINDS = (
    "maintenance",
    "timeout_after_accept",
    "drop_after_accept",
    # The withdraw request is held ``hold_seconds`` (or until the harness releases the holds)
    # before it is checked and executed (a slow exchange queue); Binance refuses it then if
    # its recvWindow has passed meanwhile.
    "slow_before_accept",
    # The withdrawal is made, but the answer names another withdrawal of the account (the
    # one made before it, or an id of nobody's when there is none).
    "answer_other_id",
    # The withdrawal is made; the answer is an empty object.
    "empty_accept",
)


@dataclass
class Fault:
    kind: str
    endpoint: str | None  # None: every endpoint of the venue
    remaining: int | None  # None: until cleared
    hold_seconds: float
    account: str | None = None  # None: every account of the venue

    def as_dict(self) -> dict:
        return {
            "kind": self.kind,
            "endpoint": self.endpoint,
            "remaining": self.remaining,
            "hold_seconds": self.hold_seconds,
            "account": self.account,
        }


@dataclass
class _ClientWindow:
    window_start: float
    count: int = 0
    cooldown_until: float = 0.0
    violations: int = 0
    banned_until: float = 0.0


@dataclass(frozen=True)
class RateLimitPolicy:
    limit: int  # requests allowed per window
    window_seconds: float
    ban_after: int  # requests tolerated while told to wait, before the ban
    ban_seconds: float


@dataclass(frozen=True)
class Throttle:
    status: int  # 429 (slow down) or 418 (banned)
    retry_after: int  # whole seconds, as in the Retry-After header


class RateLimiter:
    """Fixed-window request counter per client, with the ban exchanges hand out to clients
    that keep calling while told to wait (Binance: 429 then 418)."""

    def __init__(self) -> None:
        self.policy: RateLimitPolicy | None = None
        self._clients: dict[str, _ClientWindow] = {}
        self.served_429 = 0
        self.served_418 = 0

    def configure(self, policy: RateLimitPolicy | None) -> None:
        self.policy = policy
        self._clients.clear()

    def check(self, client: str, now: float) -> Throttle | None:
        policy = self.policy
        if policy is None:
            return None
        state = self._clients.setdefault(client, _ClientWindow(window_start=now))
        if state.banned_until > now:
            return self._throttle(418, state.banned_until - now)
        if state.cooldown_until > now:
            state.violations += 1
            if state.violations > policy.ban_after:
                state.banned_until = now + policy.ban_seconds
                state.violations = 0
                state.cooldown_until = 0.0
                return self._throttle(418, policy.ban_seconds)
            return self._throttle(429, state.cooldown_until - now)
        if now >= state.window_start + policy.window_seconds:
            elapsed_windows = math.floor((now - state.window_start) / policy.window_seconds)
            state.window_start += elapsed_windows * policy.window_seconds
            state.count = 0
            state.violations = 0
        state.count += 1
        if state.count > policy.limit:
            state.cooldown_until = state.window_start + policy.window_seconds
            return self._throttle(429, state.cooldown_until - now)
        return None

    def _throttle(self, status: int, seconds: float) -> Throttle:
        if status == 418:
            self.served_418 += 1
        else:
            self.served_429 += 1
        return Throttle(status=status, retry_after=max(1, math.ceil(seconds)))


class Books:
    """Everything one venue knows. Callers hold `lock` for compound reads; methods lock."""

    def __init__(
        self,
        venue: str,
        *,
        coins: dict[str, Coin],
        accounts: list[Account],
        fee_mode: str,
        dashed_ids: bool,
    ):
        self.venue = venue
        self.fee_mode = fee_mode
        self.dashed_ids = dashed_ids
        self.lock = threading.RLock()
        # Held withdraw requests wait on this; a release wakes the ones held now.
        self._hold_released = threading.Condition(self.lock)
        self._hold_generation = 0
        self._initial = (coins, [_copy_account(a) for a in accounts])
        self.coins = coins
        self._reset_state(accounts)

    def _reset_state(self, accounts: list[Account]) -> None:
        self.accounts = {a.name: a for a in accounts}
        self.withdrawals: list[Withdrawal] = []
        self.deposits: list[Deposit] = []
        self.faults: list[Fault] = []
        self.visibility_seconds = 0.0
        self.clock_offset_ms = 0
        # Withdraw requests being held right now (slow_before_accept).
        self.held = 0
        self.used_nonces: set[str] = set()
        self.limiter = RateLimiter()

    def reset(self) -> None:
        with self.lock:
            self._reset_state([_copy_account(a) for a in self._initial[1]])

    # --- lookups ---------------------------------------------------------------------------

    def account_by_key(self, api_key: str | None) -> Account | None:
        if not api_key:
            return None
        with self.lock:
            return next((a for a in self.accounts.values() if a.api_key == api_key), None)

    def account(self, name: str) -> Account:
        with self.lock:
            try:
                return self.accounts[name]
            except KeyError:
                raise Refusal("unknown_account", account=name) from None

    def coin(self, code: str) -> Coin:
        try:
            return self.coins[code]
        except KeyError:
            raise Refusal("unknown_coin", coin=code) from None

    def server_time_ms(self) -> int:
        return int(time.time() * 1000) + self.clock_offset_ms

    def now(self) -> datetime:
        """The server's clock (``clock_offset_ms`` from the real one): its records carry it."""
        return utcnow() + timedelta(milliseconds=self.clock_offset_ms)

    # --- withdrawals -----------------------------------------------------------------------

    def withdraw(
        self,
        account: Account,
        *,
        coin: str,
        network: str | None,
        address: str,
        tag: str | None,
        amount: Decimal,
        client_id: str | None,
    ) -> Withdrawal:
        """Check and record a withdrawal; the balance is debited at once (funds leave the
        account's control when the exchange accepts)."""
        coin_ = self.coin(coin)
        network_ = coin_.network(network)
        if not re.fullmatch(network_.address_regex, address):
            raise Refusal("invalid_address", address=address, network=network_.id)
        if amount <= 0:
            raise Refusal("malformed", param="amount")
        fee = network_.withdraw_fee
        if self.fee_mode == FEE_DEDUCTED:
            sent, debited = amount - fee, amount
        else:
            sent, debited = amount, amount + fee
        with self.lock:
            if account.whitelist is not None and address not in account.whitelist:
                raise Refusal("address_not_whitelisted", address=address)
            if amount < network_.withdraw_min:
                raise Refusal("below_minimum", minimum=plain(network_.withdraw_min))
            if sent <= 0:
                raise Refusal("amount_not_above_fee", fee=plain(fee))
            balance = account.balances.get(coin, Decimal(0))
            if balance < debited:
                raise Refusal("insufficient_balance", balance=plain(balance))
            account.balances[coin] = balance - debited
            now = self.now()
            withdrawal = Withdrawal(
                id=self._new_id(),
                account=account.name,
                coin=coin,
                network=network_.id,
                address=address,
                tag=tag,
                amount=amount,
                fee=fee,
                sent=sent,
                debited=debited,
                client_id=client_id,
                status=PENDING,
                txid=None,
                created_at=now,
                visible_at=now + timedelta(seconds=self.visibility_seconds),
            )
            self.withdrawals.append(withdrawal)
            return withdrawal

    def visible_withdrawals(self, account: Account) -> list[Withdrawal]:
        """Newest first, hiding the ones the history does not show yet."""
        now = self.now()
        with self.lock:
            rows = [
                w for w in self.withdrawals if w.account == account.name and w.visible_at <= now
            ]
        return sorted(rows, key=lambda w: w.created_at, reverse=True)

    def settle_withdrawal(
        self,
        *,
        id: str | None,
        client_id: str | None,
        status: str,
        txid: str | None,
        reverse: bool = False,
    ) -> Withdrawal:
        """Move a withdrawal on. ``reverse``: a COMPLETED one fails afterwards (the exchange
        takes its word back and refunds it), which real exchanges do."""
        if status not in WITHDRAWAL_STATUSES:
            raise Refusal("malformed", param="status")
        with self.lock:
            matches = [
                w
                for w in self.withdrawals
                if (id is not None and w.id == id)
                or (id is None and client_id is not None and w.client_id == client_id)
            ]
            if len(matches) != 1:
                raise Refusal("unknown_withdrawal", id=id, client_id=client_id, found=len(matches))
            withdrawal = matches[0]
            reversing = reverse and withdrawal.status == COMPLETED and status in REFUNDED_STATUSES
            if withdrawal.status in (COMPLETED, *REFUNDED_STATUSES) and not reversing:
                raise Refusal("withdrawal_final", status=withdrawal.status)
            if status == COMPLETED and txid is None:
                txid = "0x" + secrets.token_hex(32)
            if txid is not None:
                withdrawal.txid = txid
            withdrawal.status = status
            if status in REFUNDED_STATUSES:
                account = self.accounts[withdrawal.account]
                account.balances[withdrawal.coin] = (
                    account.balances.get(withdrawal.coin, Decimal(0)) + withdrawal.debited
                )
            if status in (COMPLETED, *REFUNDED_STATUSES):
                withdrawal.completed_at = self.now()
            return withdrawal

    def other_withdrawal(self, withdrawal: Withdrawal) -> Withdrawal | None:
        """The account's withdrawal made just before ``withdrawal`` (the answer_other_id
        fault names it)."""
        with self.lock:
            earlier = [
                w
                for w in self.withdrawals
                if w.account == withdrawal.account and w.id != withdrawal.id
            ]
        return earlier[-1] if earlier else None

    # --- deposits --------------------------------------------------------------------------

    def credit_deposit(
        self,
        *,
        account: str,
        coin: str,
        network: str | None,
        amount: Decimal,
        address: str,
        txid: str,
        tag: str | None = None,
        status: str = COMPLETED,
    ) -> Deposit:
        if status not in DEPOSIT_STATUSES:
            raise Refusal("malformed", param="status")
        network_ = self.coin(coin).network(network)
        with self.lock:
            owner = self.account(account)
            now = self.now()
            deposit = Deposit(
                id=self._new_id(),
                account=owner.name,
                coin=coin,
                network=network_.id,
                address=address,
                tag=tag,
                amount=amount,
                txid=txid,
                status=status,
                created_at=now,
            )
            if status == COMPLETED:
                self._complete(deposit, owner, now)
            self.deposits.append(deposit)
            return deposit

    def complete_deposit(self, *, txid: str) -> Deposit:
        with self.lock:
            matches = [d for d in self.deposits if d.txid == txid and d.status == PENDING]
            if len(matches) != 1:
                raise Refusal("unknown_deposit", txid=txid, found=len(matches))
            deposit = matches[0]
            self._complete(deposit, self.accounts[deposit.account], self.now())
            return deposit

    @staticmethod
    def _complete(deposit: Deposit, owner: Account, now: datetime) -> None:
        deposit.status = COMPLETED
        deposit.completed_at = now
        owner.balances[deposit.coin] = owner.balances.get(deposit.coin, Decimal(0)) + deposit.amount

    def account_deposits(self, account: Account) -> list[Deposit]:
        with self.lock:
            rows = [d for d in self.deposits if d.account == account.name]
        return sorted(rows, key=lambda d: d.created_at, reverse=True)

    # --- faults ----------------------------------------------------------------------------

    def add_fault(self, fault: Fault) -> None:
        if fault.kind not in FAULT_KINDS:
            raise Refusal("malformed", param="kind")
        with self.lock:
            self.faults.append(fault)

    def clear_faults(self) -> None:
        with self.lock:
            self.faults.clear()

    def hold(self, seconds: float) -> None:
        """Hold a withdraw request (slow_before_accept) for ``seconds``, or until
        :meth:`release_holds` is called, whichever comes first; counted in ``held`` meanwhile."""
        deadline = time.monotonic() + seconds
        with self.lock:
            generation = self._hold_generation
            self.held += 1
            try:
                while self._hold_generation == generation:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    self._hold_released.wait(left)
            finally:
                self.held -= 1

    def release_holds(self) -> int:
        """Let every withdraw request held now go on to be checked and executed; how many."""
        with self.lock:
            released = self.held
            self._hold_generation += 1
            self._hold_released.notify_all()
        return released

    def take_fault(
        self, endpoint: str, kinds: tuple[str, ...], account: str | None = None
    ) -> Fault | None:
        """The first armed fault of one of `kinds` for this endpoint (and this account, for a
        fault armed for one account only), consuming one use."""
        with self.lock:
            for fault in self.faults:
                if fault.kind not in kinds or fault.endpoint not in (None, endpoint):
                    continue
                if fault.account is not None and fault.account != account:
                    continue
                if fault.remaining is not None:
                    fault.remaining -= 1
                    if fault.remaining <= 0:
                        self.faults.remove(fault)
                return fault
        return None

    def under_maintenance(self) -> bool:
        """A venue-wide maintenance fault is armed (read without consuming it)."""
        with self.lock:
            return any(f.kind == "maintenance" and f.endpoint is None for f in self.faults)

    def nonce_seen(self, nonce: str) -> bool:
        """Record a request nonce; True when it was already used."""
        with self.lock:
            if nonce in self.used_nonces:
                return True
            self.used_nonces.add(nonce)
            return False

    def throttle(self, client: str) -> Throttle | None:
        with self.lock:
            return self.limiter.check(client, time.monotonic())

    # --- introspection ---------------------------------------------------------------------

    def snapshot(self) -> dict:
        with self.lock:
            return {
                "accounts": {
                    a.name: {
                        "balances": {c: plain(v) for c, v in a.balances.items()},
                        "whitelist": sorted(a.whitelist) if a.whitelist is not None else None,
                    }
                    for a in self.accounts.values()
                },
                "withdrawals": [w.as_dict() for w in self.withdrawals],
                "deposits": [d.as_dict() for d in self.deposits],
                "faults": [f.as_dict() for f in self.faults],
                "visibility_seconds": self.visibility_seconds,
                "clock_offset_ms": self.clock_offset_ms,
                "held": self.held,
                "rate_limit": (
                    None
                    if self.limiter.policy is None
                    else {
                        "limit": self.limiter.policy.limit,
                        "window_seconds": self.limiter.policy.window_seconds,
                        "ban_after": self.limiter.policy.ban_after,
                        "ban_seconds": self.limiter.policy.ban_seconds,
                    }
                ),
                "served_429": self.limiter.served_429,
                "served_418": self.limiter.served_418,
            }

    def _new_id(self) -> str:
        # Binance ids are 32 hex digits, Upbit's are dashed UUIDs.
        return str(uuid.uuid4()) if self.dashed_ids else uuid.uuid4().hex


def _copy_account(account: Account) -> Account:
    return Account(
        name=account.name,
        api_key=account.api_key,
        secret=account.secret,
        balances=dict(account.balances),
        whitelist=set(account.whitelist) if account.whitelist is not None else None,
        deposit_addresses=dict(account.deposit_addresses),
    )


@dataclass
class AccountSpec:
    """An account as written in the config file (keys generated when left out)."""

    name: str
    api_key: str = field(default_factory=lambda: secrets.token_hex(16))
    secret: str = field(default_factory=lambda: secrets.token_hex(32))
    balances: dict[str, str] = field(default_factory=dict)
    whitelist: list[str] | None = None
    deposit_addresses: dict[str, str] = field(default_factory=dict)

    def build(self) -> Account:
        return Account(
            name=self.name,
            api_key=self.api_key,
            secret=self.secret,
            balances={c: Decimal(str(v)) for c, v in self.balances.items()},
            whitelist=set(self.whitelist) if self.whitelist is not None else None,
            deposit_addresses=dict(self.deposit_addresses),
        )

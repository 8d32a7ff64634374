"""The exchange calls the executors make, one function per question, each answered by the
account's dialect (``venues.cex.exchanges``) through its ccxt client; every ccxt exception
leaves as the executor taxonomy's (``errors.translate``)."""

import time
from collections.abc import Callable
from decimal import Decimal
from typing import Any, TypeVar

import ccxt

from venues.cex import clock, records
from venues.cex.client import Throttled, client, secrets_of
from venues.cex.config import ExchangeAccount, plain
from venues.cex.errors import stamp_refused, told_to_wait, translate
from venues.cex.exchanges.base import Order, Rules, Validity

T = TypeVar("T")
# How long the exchange's withdrawal rules (precision, minimum, fee) are trusted in memory.
RULES_SECONDS = 600.0
# How many times one withdrawal is stamped afresh after the exchange refused its timestamp.
MAX_RESTAMPS = 2


def ask(account: ExchangeAccount, phase: str, call: Callable[[Any], T]) -> T:
    """``call(ccxt_client)`` with its errors translated for ``phase``."""
    exchange = client(account)
    exchange.qtg_max_wait = 2.0
    try:
        return call(exchange)
    except Exception as exc:
        raise translate(exc, phase=phase, secrets=secrets_of(account)) from None


def skew(
    account: ExchangeAccount,
    phase: str = "prepare",
    *,
    refresh_seconds: float = clock.REFRESH_SECONDS,
) -> clock.Skew:
    """The account's clock skew (measured when not known for ``refresh_seconds``)."""
    return ask(
        account,
        phase,
        lambda exchange: clock.known(account, exchange, refresh_seconds=refresh_seconds),
    )


def preflight(account: ExchangeAccount, coin: str, amount: Decimal) -> dict[str, Any]:
    """Before a withdrawal: the exchange is up (Binance's system status; the others have
    none), the keys sign (a private read: the exchange checks the signature), and the account
    holds the amount. A shortfall is refused here, before anything is sent."""

    def check(exchange: Any) -> dict[str, Any]:
        account.dialect.check_up(exchange)
        free = account.dialect.free_balance(exchange, coin)
        if free < amount:
            raise ccxt.InsufficientFunds(f"{coin} balance {free} is less than {amount}")
        return {"free_balance": plain(free)}

    return ask(account, "prepare", check)


_rules: dict[tuple[str, str, str], tuple[float, Rules]] = {}


def rules(account: ExchangeAccount, coin: str, network_id: str, phase: str = "prepare") -> Rules:
    """The exchange's precision, minimum and fee for ``coin`` on ``network_id`` (cached for
    ``RULES_SECONDS``)."""
    key = (account.name, coin, network_id)
    found = _rules.get(key)
    if found is None or time.monotonic() - found[0] > RULES_SECONDS:

        def read(exchange: Any) -> Rules:
            try:
                return account.dialect.rules(exchange, coin, network_id)
            except LookupError as exc:
                raise ccxt.BadRequest(str(exc)) from None

        found = (time.monotonic(), ask(account, phase, read))
        _rules[key] = found
    return found[1]


def forget_rules() -> None:
    """Read every account's withdrawal rules again at their next use."""
    _rules.clear()


def deposit_address(account: ExchangeAccount, coin: str, network_id: str) -> str:
    """The account's deposit address for ``coin`` on ``network_id``, as the exchange gives it."""
    return ask(
        account,
        "prepare",
        lambda exchange: account.dialect.deposit_address(exchange, coin, network_id),
    )


def withdraw(
    account: ExchangeAccount,
    *,
    coin: str,
    amount: Decimal,
    address: str,
    network_id: str,
    client_id: str,
    budget_seconds: float,
    fence: Callable[[Any], Validity | None],
) -> tuple[dict[str, Any], int]:
    """Send the withdrawal: the exchange's raw answer, and how many times it said to wait
    first. ``fence(exchange)`` is called right before each request leaves (it raises when
    the request may not go; it returns the validity to sign it with). A 429/418 answered to
    it means the exchange refused before acting: the same request (the same client id) is
    sent again after the wait it named, for as long as ``budget_seconds`` allows; then the
    wait is the caller's (TransientError). The amount goes as the journal's exact text."""
    exchange = client(account)
    deadline = time.monotonic() + budget_seconds
    waits = 0
    restamped = 0

    def waited_out(exc: BaseException) -> bool:
        """Sleep out the wait ``exc`` names (ours or the exchange's), if the budget allows."""
        nonlocal waits
        wait = told_to_wait(exc)
        if wait is None or time.monotonic() + wait >= deadline:
            return False
        waits += 1
        time.sleep(wait)
        return True

    while True:
        exchange.qtg_max_wait = max(0.0, deadline - time.monotonic())
        try:
            # The budget's wait comes before the stamp and the fence, never between them.
            exchange.qtg_reserve()
        except Throttled as exc:
            if waited_out(exc):
                continue
            raise translate(exc, phase="submit", secrets=secrets_of(account)) from None
        validity = fence(exchange)
        try:
            order = Order(
                coin=coin,
                amount=plain(amount),
                address=address,
                network_id=network_id,
                client_id=client_id,
                validity=validity,
                extra=dict(account.withdraw_params),
            )
            answer = account.dialect.withdraw(exchange, order)
            return (answer if isinstance(answer, dict) else {"answer": answer}), waits
        except Exception as exc:
            if waited_out(exc):
                continue
            if (
                validity is not None
                and stamp_refused(exc)
                and restamped < MAX_RESTAMPS
                and time.monotonic() < deadline
            ):
                # The exchange refused the request's timestamp before acting on it (Binance
                # -1021): the same request goes again, fenced and stamped afresh.
                restamped += 1
                continue
            raise translate(exc, phase="submit", secrets=secrets_of(account)) from None


def withdrawals_by_client_id(
    account: ExchangeAccount, coin: str, client_id: str, phase: str = "recover"
) -> list[records.Record]:
    """The withdrawals carrying our client id (exchanges that take one)."""
    return ask(
        account,
        phase,
        lambda exchange: account.dialect.withdrawals_by_client_id(exchange, coin, client_id),
    )


def withdrawal_by_id(
    account: ExchangeAccount, coin: str, withdrawal_id: str, phase: str = "observe"
) -> records.Record | None:
    """The withdrawal with the exchange's id (None while its history does not show it)."""
    return ask(
        account,
        phase,
        lambda exchange: account.dialect.withdrawal_by_id(exchange, coin, withdrawal_id),
    )


def recent_withdrawals(account: ExchangeAccount, coin: str) -> list[records.Record]:
    """The newest withdrawals of ``coin`` (one page of 100, newest first)."""
    return ask(
        account, "recover", lambda exchange: account.dialect.recent_withdrawals(exchange, coin)
    )


def deposits_by_txid(account: ExchangeAccount, coin: str, txid: str) -> list[records.Record]:
    """The deposits of ``coin`` the exchange records for transaction ``txid``."""
    found = ask(
        account,
        "observe",
        lambda exchange: account.dialect.deposits_by_txid(exchange, coin, txid),
    )
    return [record for record in found if same_txid(record.txid, txid)]


def same_txid(a: str, b: str) -> bool:
    if a.startswith("0x") or b.startswith("0x"):
        return a.lower() == b.lower()
    return a == b

"""The local exchange speaks Upbit well enough for ccxt: every test drives it with
`ccxt.upbit`, pointed at the stand-in by its URLs, and reads the results back through ccxt."""

import json
import threading
import time
import urllib.error
import urllib.request
from datetime import UTC, datetime

import ccxt
import pytest

from standins.exchange import LocalExchange

pytestmark = pytest.mark.standin

ADDRESS = "0x" + "ab" * 20
OTHER_ADDRESS = "0x" + "cd" * 20


@pytest.fixture(scope="module")
def local_exchange():
    with LocalExchange() as exchange:
        yield exchange


@pytest.fixture(autouse=True)
def fresh_books(local_exchange):
    local_exchange.reset()


@pytest.fixture
def upbit(local_exchange):
    return ccxt.upbit(local_exchange.ccxt_config("upbit"))


def withdraw(client, amount="10", address=ADDRESS):
    return client.withdraw("USDT", amount, address, {"network": "ETH"})


def recover(client, *, amount: str, submitted_at_ms: int) -> list[dict]:
    """Upbit takes no client withdrawal id: after an unanswered submit the withdrawal can only
    be found in the history, by currency, network, amount and time."""
    return [
        w
        for w in client.fetch_withdrawals("USDT")
        if w["info"]["net_type"] == "ETH"
        and w["info"]["amount"] == amount
        and w["timestamp"] >= submitted_at_ms - 1000  # created_at has whole seconds
    ]


def test_fetch_balance_reports_the_accounts_balances(upbit):
    balance = upbit.fetch_balance()

    assert balance["USDT"]["free"] == 10000
    assert balance["BTC"]["total"] == 1


def test_a_withdrawal_is_found_by_its_uuid_and_in_the_history(upbit):
    accepted = withdraw(upbit, amount="10")

    found = upbit.fetch_withdrawal(accepted["id"])
    assert found["id"] == accepted["id"]
    assert found["info"]["state"] == "WAITING"
    assert [w["id"] for w in upbit.fetch_withdrawals("USDT")] == [accepted["id"]]
    # Upbit charges the fee on top: 10 sent on chain, 1 fee, 11 off the balance.
    assert (found["amount"], found["fee"]["cost"]) == (10, 1)
    assert upbit.fetch_balance()["USDT"]["free"] == 9989


def test_a_settled_withdrawal_reads_ok_with_its_txid(upbit, local_exchange):
    accepted = withdraw(upbit)

    local_exchange.settle_withdrawal("upbit", id=accepted["id"], txid="0x" + "34" * 32)

    found = upbit.fetch_withdrawal(accepted["id"])
    assert (found["status"], found["txid"]) == ("ok", "0x" + "34" * 32)
    assert found["info"]["state"] == "DONE"


def test_history_lag_hides_a_withdrawal_then_shows_it(upbit, local_exchange):
    local_exchange.configure("upbit", withdrawal_visibility_seconds=0.4)
    accepted = withdraw(upbit)

    assert upbit.fetch_withdrawals("USDT") == []
    with pytest.raises(ccxt.ExchangeError, match="withdraw_not_found"):
        upbit.fetch_withdrawal(accepted["id"])
    time.sleep(0.5)
    assert [w["id"] for w in upbit.fetch_withdrawals("USDT")] == [accepted["id"]]


def test_a_timeout_after_accept_is_recovered_from_the_history_exactly_once(local_exchange):
    client = ccxt.upbit(local_exchange.ccxt_config("upbit", timeout=300))
    client.load_markets()
    local_exchange.add_fault("upbit", "timeout_after_accept", times=1, hold_seconds=1.0)
    submitted_at_ms = int(datetime.now(UTC).timestamp() * 1000)

    with pytest.raises(ccxt.RequestTimeout):
        withdraw(client, amount="12.5")

    assert len(recover(client, amount="12.5", submitted_at_ms=submitted_at_ms)) == 1
    assert client.fetch_balance()["USDT"]["free"] == 10000 - 12.5 - 1


def test_a_held_withdraw_request_is_carried_out_when_released_not_before(local_exchange):
    local_exchange.add_fault(
        "upbit", "slow_before_accept", endpoint="withdraw", times=1, hold_seconds=60
    )
    client = ccxt.upbit(local_exchange.ccxt_config("upbit", timeout=30_000))
    client.load_markets()
    answers = []
    sender = threading.Thread(target=lambda: answers.append(withdraw(client, amount="7")))
    sender.start()
    deadline = time.monotonic() + 10
    while local_exchange.state("upbit")["held"] != 1 and time.monotonic() < deadline:
        time.sleep(0.05)

    assert local_exchange.state("upbit")["held"] == 1
    assert client.fetch_withdrawals("USDT") == []  # held: nothing made yet

    started = time.monotonic()
    assert local_exchange.release_holds("upbit") == 1
    sender.join(timeout=10)
    assert time.monotonic() - started < 5  # not the fault's 60 s
    [made] = client.fetch_withdrawals("USDT")
    assert [a["id"] for a in answers] == [made["id"]]
    assert local_exchange.state("upbit")["held"] == 0
    assert local_exchange.release_holds("upbit") == 0  # nothing left to release


def test_over_the_limit_answers_429_and_ignoring_it_earns_a_418_ban(upbit, local_exchange):
    upbit.load_markets()
    local_exchange.configure(
        "upbit", rate_limit={"limit": 1, "window_seconds": 30, "ban_after": 1, "ban_seconds": 60}
    )
    upbit.fetch_balance()

    with pytest.raises(ccxt.RateLimitExceeded):
        upbit.fetch_balance()
    assert upbit.last_response_headers["Remaining-Req"] == "group=default; min=0; sec=0"

    with pytest.raises(ccxt.RateLimitExceeded):
        upbit.fetch_balance()
    with pytest.raises(ccxt.DDoSProtection, match="418") as banned:
        upbit.fetch_balance()
    assert not isinstance(banned.value, ccxt.RateLimitExceeded)


def test_more_than_the_balance_raises_insufficient_funds(upbit, local_exchange):
    local_exchange.set_balance("upbit", "USDT", "10.5")  # 10 + fee 1 does not fit

    with pytest.raises(ccxt.InsufficientFunds):
        withdraw(upbit, amount="10")

    assert local_exchange.state("upbit")["withdrawals"] == []


def test_an_unregistered_address_is_refused_with_upbits_withdraw_address_error(
    upbit, local_exchange
):
    local_exchange.set_whitelist("upbit", [OTHER_ADDRESS])

    # ccxt 4.5 has no mapping for Upbit's `withdraw_address`: it stays a plain ExchangeError.
    with pytest.raises(ccxt.ExchangeError, match='"name":"withdraw_address"'):
        withdraw(upbit, address=ADDRESS)

    withdraw(upbit, address=OTHER_ADDRESS)
    assert len(upbit.fetch_withdrawals("USDT")) == 1


def test_maintenance_answers_503_which_ccxt_raises_as_exchange_not_available(upbit, local_exchange):
    upbit.load_markets()
    local_exchange.add_fault("upbit", "maintenance", endpoint="withdraw", times=1)

    with pytest.raises(ccxt.ExchangeNotAvailable):
        withdraw(upbit)

    withdraw(upbit)
    assert len(upbit.fetch_withdrawals("USDT")) == 1


def test_a_wrong_secret_is_refused_so_the_jwt_signature_is_checked(local_exchange):
    client = ccxt.upbit(local_exchange.ccxt_config("upbit", secret="not-the-secret"))

    with pytest.raises(ccxt.AuthenticationError, match="jwt_verification"):
        client.fetch_balance()


def test_a_reused_nonce_is_refused(upbit):
    upbit.load_markets()
    upbit.uuid = lambda: "the-same-nonce"
    upbit.fetch_balance()

    with pytest.raises(ccxt.ExchangeError, match="nonce_used"):
        upbit.fetch_balance()


def test_a_query_hash_that_does_not_cover_the_query_is_refused(upbit, local_exchange):
    # A token ccxt signed for ?currency=USDT, sent with ?currency=ETH instead.
    signed = upbit.sign("deposits", ["private"], "GET", {"currency": "USDT"})
    url = signed["url"].replace("currency=USDT", "currency=ETH")
    request = urllib.request.Request(url, headers=signed["headers"])

    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=5)

    assert refused.value.code == 401
    assert json.loads(refused.value.read())["error"]["name"] == "invalid_query_payload"


def test_deposits_are_listed_and_found_by_txid(upbit, local_exchange):
    local_exchange.credit_deposit(
        "upbit", coin="USDT", network="ETH", amount="25.5", address=ADDRESS, txid="0xaa"
    )
    local_exchange.credit_deposit(
        "upbit", coin="USDT", network="TRX", amount="7", address="T" + "a" * 33, txid="0xbb"
    )

    [deposit] = upbit.fetch_deposits("USDT", params={"txids[]": "0xaa"})
    assert (deposit["txid"], deposit["amount"], deposit["status"]) == ("0xaa", 25.5, "ok")
    assert deposit["info"]["net_type"] == "ETH"
    # Upbit's deposit records carry no address: only the account's own addresses receive.
    assert deposit["address"] is None
    assert len(upbit.fetch_deposits("USDT")) == 2
    assert upbit.fetch_balance()["USDT"]["free"] == 10032.5

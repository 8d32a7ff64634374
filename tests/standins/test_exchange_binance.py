"""The local exchange speaks Binance well enough for ccxt: every test drives it with
`ccxt.binance`, pointed at the stand-in by its URLs, and reads the results back through ccxt."""

import threading
import time
from decimal import Decimal

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
def binance(local_exchange):
    return ccxt.binance(local_exchange.ccxt_config("binance"))


def withdraw(client, amount="10", client_id="node-1-attempt-1", address=ADDRESS):
    params = {"network": "ETH", "withdrawOrderId": client_id}
    return client.withdraw("USDT", amount, address, params)


def by_client_id(client, client_id):
    return client.fetch_withdrawals("USDT", params={"withdrawOrderId": client_id})


def test_fetch_balance_reports_the_accounts_spot_balances(binance):
    balance = binance.fetch_balance()

    assert balance["USDT"]["free"] == 10000
    assert balance["ETH"]["total"] == 10


def test_a_withdrawal_is_found_by_its_client_id(binance, local_exchange):
    accepted = withdraw(binance, client_id="node-7-attempt-1")

    [found] = by_client_id(binance, "node-7-attempt-1")
    assert found["id"] == accepted["id"]
    assert found["info"]["withdrawOrderId"] == "node-7-attempt-1"
    assert found["status"] == "pending"
    assert found["address"] == ADDRESS
    assert found["network"] == "ERC20"  # ccxt's code for Binance's ETH network
    # Binance takes the fee out of the amount asked for: 10 asked, 1 fee, 9 sent on chain.
    assert (found["amount"], found["fee"]["cost"]) == (9, 1)
    assert binance.fetch_balance()["USDT"]["free"] == 9990
    assert by_client_id(binance, "node-7-attempt-2") == []


def test_a_settled_withdrawal_reads_ok_with_its_txid(binance, local_exchange):
    withdraw(binance, client_id="c-settle")

    local_exchange.settle_withdrawal("binance", client_id="c-settle", txid="0x" + "12" * 32)

    [found] = by_client_id(binance, "c-settle")
    assert found["status"] == "ok"
    assert found["txid"] == "0x" + "12" * 32
    assert found["info"]["status"] == 6


def test_a_failed_withdrawal_gives_the_money_back(binance, local_exchange):
    withdraw(binance, client_id="c-fail")

    local_exchange.settle_withdrawal("binance", client_id="c-fail", status="failed")

    [found] = by_client_id(binance, "c-fail")
    assert found["status"] == "failed"
    assert binance.fetch_balance()["USDT"]["free"] == 10000


def test_history_lag_hides_a_withdrawal_then_shows_it(binance, local_exchange):
    local_exchange.configure("binance", withdrawal_visibility_seconds=0.4)
    accepted = withdraw(binance, client_id="c-lag")

    assert by_client_id(binance, "c-lag") == []
    time.sleep(0.5)
    assert [w["id"] for w in by_client_id(binance, "c-lag")] == [accepted["id"]]


def test_a_timeout_after_accept_raises_request_timeout_and_the_withdrawal_exists_once(
    local_exchange,
):
    client = ccxt.binance(local_exchange.ccxt_config("binance", timeout=300))
    client.load_markets()
    local_exchange.add_fault("binance", "timeout_after_accept", times=1, hold_seconds=1.0)

    with pytest.raises(ccxt.RequestTimeout):
        withdraw(client, client_id="c-timeout")

    assert len(by_client_id(client, "c-timeout")) == 1
    assert client.fetch_balance()["USDT"]["free"] == 9990


def test_a_connection_closed_after_accept_raises_network_error_and_the_withdrawal_exists_once(
    binance, local_exchange
):
    binance.load_markets()
    local_exchange.add_fault("binance", "drop_after_accept", times=1)

    with pytest.raises(ccxt.NetworkError) as raised:
        withdraw(binance, client_id="c-drop")

    assert not isinstance(raised.value, ccxt.RequestTimeout)
    assert len(by_client_id(binance, "c-drop")) == 1


def test_a_reused_client_id_is_not_deduplicated_by_the_exchange(binance):
    withdraw(binance, client_id="c-twice")
    withdraw(binance, client_id="c-twice")

    assert len(by_client_id(binance, "c-twice")) == 2


def test_over_the_limit_answers_429_with_retry_after_and_ignoring_it_earns_a_418_ban(
    binance, local_exchange
):
    binance.load_markets()
    local_exchange.configure(
        "binance",
        rate_limit={"limit": 1, "window_seconds": 30, "ban_after": 1, "ban_seconds": 60},
    )
    binance.fetch_balance()

    with pytest.raises(ccxt.DDoSProtection, match=r"429.*-1003"):
        binance.fetch_balance()
    assert 1 <= int(binance.last_response_headers["Retry-After"]) <= 30

    with pytest.raises(ccxt.DDoSProtection, match="429"):
        binance.fetch_balance()
    with pytest.raises(ccxt.DDoSProtection, match=r"418.*IP banned until"):
        binance.fetch_balance()
    assert int(binance.last_response_headers["Retry-After"]) == 60


def test_a_client_that_honours_retry_after_is_never_banned(binance, local_exchange):
    binance.load_markets()
    local_exchange.configure(
        "binance", rate_limit={"limit": 3, "window_seconds": 1, "ban_after": 0, "ban_seconds": 60}
    )
    done, throttled = 0, 0
    while done < 6:
        try:
            binance.fetch_balance()
            done += 1
        except ccxt.DDoSProtection:
            throttled += 1
            time.sleep(int(binance.last_response_headers["Retry-After"]))

    state = local_exchange.state("binance")
    assert throttled >= 1
    assert (state["served_429"], state["served_418"]) == (throttled, 0)


def test_more_than_the_balance_raises_insufficient_funds(binance, local_exchange):
    local_exchange.set_balance("binance", "USDT", "5")

    with pytest.raises(ccxt.InsufficientFunds, match="-4026"):
        withdraw(binance, amount="10")

    assert local_exchange.state("binance")["withdrawals"] == []


def test_an_address_off_the_whitelist_raises_permission_denied(binance, local_exchange):
    local_exchange.set_whitelist("binance", [OTHER_ADDRESS])

    with pytest.raises(ccxt.PermissionDenied, match="-4035"):
        withdraw(binance, address=ADDRESS)

    withdraw(binance, address=OTHER_ADDRESS, client_id="c-white")
    assert len(by_client_id(binance, "c-white")) == 1


def test_an_address_the_network_cannot_have_is_refused_before_any_withdrawal(
    binance, local_exchange
):
    with pytest.raises(ccxt.BadRequest, match="-4033"):
        withdraw(binance, address="TQn9Y2khEsLJW1ChVWFMSMeRDow5KcbLSE")

    assert local_exchange.state("binance")["withdrawals"] == []


def test_maintenance_answers_503_which_ccxt_raises_as_on_maintenance(binance, local_exchange):
    binance.load_markets()
    local_exchange.add_fault("binance", "maintenance")

    with pytest.raises(ccxt.OnMaintenance):
        withdraw(binance)
    assert binance.fetch_status()["status"] == "maintenance"

    local_exchange.clear_faults("binance")
    withdraw(binance, client_id="c-after")
    assert binance.fetch_status()["status"] == "ok"


def test_a_wrong_secret_is_refused_so_the_signature_is_checked(local_exchange):
    config = local_exchange.ccxt_config("binance", secret="not-the-secret")
    client = ccxt.binance(config)

    with pytest.raises(ccxt.AuthenticationError, match="-1022"):
        client.fetch_balance()


def test_an_unknown_api_key_is_refused(local_exchange):
    client = ccxt.binance(local_exchange.ccxt_config("binance", apiKey="someone-else"))

    with pytest.raises(ccxt.AuthenticationError, match="-2015"):
        client.fetch_balance()


def test_a_timestamp_outside_the_recv_window_is_refused(binance, local_exchange):
    binance.load_markets()
    local_exchange.configure("binance", clock_offset_ms=15_000)  # ccxt sends recvWindow 10000

    with pytest.raises(ccxt.InvalidNonce, match="-1021"):
        binance.fetch_balance()


def test_deposits_are_listed_with_txid_amount_and_address(binance, local_exchange):
    local_exchange.credit_deposit(
        "binance", coin="USDT", network="ETH", amount="25.5", address=ADDRESS, txid="0xaa"
    )
    local_exchange.credit_deposit(
        "binance", coin="USDT", network="ETH", amount="7", address=ADDRESS, txid="0xbb"
    )

    [deposit] = binance.fetch_deposits("USDT", params={"txId": "0xaa"})
    assert (deposit["txid"], deposit["amount"], deposit["address"]) == ("0xaa", 25.5, ADDRESS)
    assert deposit["status"] == "ok"
    assert deposit["info"]["amount"] == "25.5"
    assert len(binance.fetch_deposits("USDT")) == 2
    assert binance.fetch_balance()["USDT"]["free"] == 10032.5


def test_a_pending_deposit_is_credited_only_once_completed(binance, local_exchange):
    local_exchange.credit_deposit(
        "binance",
        coin="USDT",
        network="ETH",
        amount="3",
        address=ADDRESS,
        txid="0xcc",
        status="pending",
    )
    assert binance.fetch_deposits("USDT")[0]["status"] == "pending"
    assert binance.fetch_balance()["USDT"]["free"] == 10000

    local_exchange.complete_deposit("binance", "0xcc")

    assert binance.fetch_deposits("USDT")[0]["status"] == "ok"
    assert binance.fetch_balance()["USDT"]["free"] == 10003


def test_concurrent_withdrawals_never_overdraw_the_account(local_exchange):
    local_exchange.set_balance("binance", "USDT", "50")
    outcomes: list[str] = []

    def one(index: int) -> None:
        client = ccxt.binance(local_exchange.ccxt_config("binance"))
        try:
            withdraw(client, amount="10", client_id=f"c-race-{index}")
            outcomes.append("accepted")
        except ccxt.InsufficientFunds:
            outcomes.append("refused")

    threads = [threading.Thread(target=one, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert sorted(outcomes) == ["accepted"] * 5 + ["refused"] * 3
    state = local_exchange.state("binance")
    assert Decimal(state["accounts"]["main"]["balances"]["USDT"]) == 0
    assert len(state["withdrawals"]) == 5

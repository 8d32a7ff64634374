"""What real exchanges do to a withdrawal, done by the local exchange, and what the lane makes
of it: driven through the workers' services, read back from the exchange's own books."""

import pytest

from movements.models import MovementEvent
from tests.execution.conftest import assert_history_replays, node_path
from tests.movements.drive import node
from tests.venues.cex.conftest import create, drive, env_name, story, withdrawals
from venues.cex.models import CexWithdrawal

pytestmark = [pytest.mark.standin, pytest.mark.django_db]

SOURCES = [
    ("binance-sender", "upbit-receiver"),
    ("upbit-sender", "binance-receiver"),
    ("bithumb-sender", "upbit-receiver"),
]


def venue_of(name: str) -> tuple[str, str]:
    kind, account = name.split("-")
    return kind, account


@pytest.mark.parametrize("source,destination", SOURCES)
def test_a_timeout_after_the_exchange_accepted_is_recovered_with_one_withdrawal(
    exchange, creator, source, destination
):
    # The exchange records the withdrawal, then answers nothing for longer than our timeout.
    kind, account = venue_of(source)
    exchange.add_fault(kind, "timeout_after_accept", endpoint="withdraw", times=1, hold_seconds=4)

    request = drive(create(creator, source=source, destination=destination), exchange)

    assert request.request_state == "COMPLETED", story(request)
    assert node_path(request, "withdraw")[-3:] == ["SUBMITTING", "UNKNOWN", "COMPLETED"]
    [sent] = withdrawals(exchange, kind, account)
    withdraw = node(request, "withdraw")
    assert withdraw.external_ref == sent["id"]
    recovered = MovementEvent.objects.get(
        request=request, node_key="withdraw", new_state="COMPLETED"
    )
    expected = "found by client id" if kind == "binance" else "matched in the history"
    assert recovered.detail["finding"].startswith(expected)
    if kind == "binance":
        assert sent["client_id"] == withdraw.idempotency_key
    assert CexWithdrawal.objects.get(client_id=withdraw.idempotency_key).withdrawal_id == sent["id"]
    assert_history_replays(request)


@pytest.mark.parametrize("source,destination", SOURCES)
def test_a_history_lagging_past_the_first_recovery_still_ends_completed_with_one_withdrawal(
    exchange, creator, source, destination
):
    # The withdrawal stays out of the history for 4 s (the account's window is 6 s); the
    # answer to the submit is lost after 2 s: the first recovery attempts find nothing.
    kind, account = venue_of(source)
    exchange.configure(kind, withdrawal_visibility_seconds=4)
    exchange.add_fault(kind, "timeout_after_accept", endpoint="withdraw", times=1, hold_seconds=3)

    request = drive(create(creator, source=source, destination=destination), exchange)

    assert request.request_state == "COMPLETED", story(request)
    path = node_path(request, "withdraw")
    assert path[-3:] == ["SUBMITTING", "UNKNOWN", "COMPLETED"]
    assert "FAILED" not in path
    withdraw = node(request, "withdraw")
    # Recovery asked before the history showed it, and asked again later: inside Binance's
    # request window "not found" is no answer yet (a redispatch); Upbit's is NOT_FOUND.
    asked = withdraw.result.get("not_found_answers", 0) + withdraw.dispatch_count - 1
    assert asked >= 1, "recovery asked before the history showed it"
    assert len(withdrawals(exchange, kind, account)) == 1
    assert_history_replays(request)


def test_a_wrong_secret_is_refused_by_the_exchange_and_nothing_is_withdrawn(
    exchange, creator, monkeypatch
):
    # Binance checks the HMAC-SHA256 signature of every private call.
    wrong = "not-the-secret-of-binance-sender-0000"
    monkeypatch.setenv(env_name("binance-sender", "SECRET"), wrong)

    request = drive(create(creator), exchange)

    assert request.request_state == "FAILED"
    assert node_path(request, "withdraw")[-2:] == ["PREPARING", "FAILED"]
    failed = MovementEvent.objects.get(request=request, node_key="withdraw", new_state="FAILED")
    assert "Signature for this request is not valid" in failed.detail["error"]
    assert failed.detail["error"].startswith("DeterministicError")
    assert withdrawals(exchange, "binance", "sender") == []
    assert wrong not in str(failed.detail)


def test_a_wrong_upbit_secret_is_refused_by_the_exchange_and_nothing_is_withdrawn(
    exchange, creator, monkeypatch
):
    # Upbit checks the JWT's HMAC and the SHA-512 hash of the query it carries.
    monkeypatch.setenv(env_name("upbit-sender", "SECRET"), "not-the-secret-of-upbit-sender-0000")

    request = drive(
        create(creator, source="upbit-sender", destination="binance-receiver"), exchange
    )

    assert request.request_state == "FAILED"
    failed = MovementEvent.objects.get(request=request, node_key="withdraw", new_state="FAILED")
    assert "jwt_verification" in failed.detail["error"]
    assert withdrawals(exchange, "upbit", "sender") == []


@pytest.mark.parametrize("source,destination", SOURCES)
def test_an_insufficient_balance_fails_before_anything_is_sent(
    exchange, creator, source, destination
):
    kind, account = venue_of(source)
    exchange.set_balance(kind, "USDT", "10", account=account)

    request = drive(create(creator, source=source, destination=destination, amount="25"), exchange)

    assert request.request_state == "FAILED"
    assert "SUBMITTING" not in node_path(request, "withdraw")
    failed = MovementEvent.objects.get(request=request, node_key="withdraw", new_state="FAILED")
    assert "InsufficientFunds" in failed.detail["error"]
    assert withdrawals(exchange, kind, account) == []
    assert exchange.state(kind)["accounts"][account]["balances"]["USDT"] == "10"


@pytest.mark.parametrize("source,destination", SOURCES)
def test_an_address_off_the_whitelist_is_refused_and_nothing_is_withdrawn(
    exchange, creator, source, destination
):
    kind, account = venue_of(source)
    exchange.set_whitelist(kind, ["0x" + "ab" * 20], account=account)

    request = drive(create(creator, source=source, destination=destination), exchange)

    assert request.request_state == "FAILED"
    assert node_path(request, "withdraw")[-2:] == ["SUBMITTING", "FAILED"]
    failed = MovementEvent.objects.get(request=request, node_key="withdraw", new_state="FAILED")
    assert failed.detail["error"].startswith("DeterministicError: the exchange refused")
    assert withdrawals(exchange, kind, account) == []
    assert exchange.state(kind)["accounts"][account]["balances"]["USDT"] == "1000"
    journal = CexWithdrawal.objects.get(client_id=node(request, "withdraw").idempotency_key)
    assert journal.state == CexWithdrawal.State.REFUSED


@pytest.mark.parametrize("source,destination", SOURCES)
def test_maintenance_is_waited_out_and_the_movement_completes(
    exchange, creator, source, destination
):
    # 503 on every endpoint (Binance's system status says so too) for the first attempts.
    kind, account = venue_of(source)
    exchange.add_fault(kind, "maintenance")
    request = create(creator, source=source, destination=destination)

    def end_maintenance_after_two_refusals():
        attempts = MovementEvent.objects.filter(
            request=request, node_key="withdraw", new_state="READY", old_state="PREPARING"
        ).count()
        if attempts >= 2:
            exchange.clear_faults(kind)

    request = drive(request, exchange, during=end_maintenance_after_two_refusals, timeout=60)

    assert request.request_state == "COMPLETED", story(request)
    retried = MovementEvent.objects.filter(
        request=request, node_key="withdraw", old_state="PREPARING", new_state="READY"
    )
    assert retried.count() >= 2
    assert all("unavailable" in e.detail["error"] for e in retried)
    assert len(withdrawals(exchange, kind, account)) == 1


def test_upbit_holds_a_second_withdrawal_of_the_same_amount_while_the_first_is_unknown(
    exchange, creator
):
    # Upbit has no client id and its records no address: two withdrawals of 25 USDT from one
    # account in flight with unknown outcomes could not be told apart in its history.
    exchange.configure("upbit", withdrawal_visibility_seconds=3)
    exchange.add_fault(
        "upbit", "timeout_after_accept", endpoint="withdraw", times=1, hold_seconds=3
    )
    first = create(creator, source="upbit-sender", destination="binance-receiver")
    drive(first, until=lambda r: node(r, "withdraw").node_state == "UNKNOWN", deliver=False)

    second = create(creator, source="upbit-sender", destination="binance-receiver")
    first = drive(first, exchange)
    second = drive(second, exchange)

    assert (first.request_state, second.request_state) == ("COMPLETED", "COMPLETED")
    held = MovementEvent.objects.filter(
        request=second, node_key="withdraw", old_state="PREPARING", new_state="READY"
    )
    assert any("unknown outcome" in e.detail["error"] for e in held), story(second)
    sent = withdrawals(exchange, "upbit", "sender")
    assert len(sent) == 2
    refs = {node(first, "withdraw").external_ref, node(second, "withdraw").external_ref}
    assert refs == {w["id"] for w in sent}


def test_a_429_answered_to_the_withdrawal_is_waited_out_with_the_same_client_id(exchange, creator):
    # A worker that has worked before (its client's markets loaded: a fresh client spends
    # several requests on them), then one signed request per 2 s window: the balance read in
    # prepare spends it, so the withdrawal right after is told 429 (refused before acting).
    assert drive(create(creator), exchange).request_state == "COMPLETED"
    exchange.reset()
    exchange.configure(
        "binance", rate_limit={"limit": 1, "window_seconds": 2, "ban_after": 50, "ban_seconds": 60}
    )

    request = drive(create(creator), exchange, timeout=60)

    assert request.request_state == "COMPLETED", story(request)
    withdraw = node(request, "withdraw")
    assert "UNKNOWN" not in node_path(request, "withdraw")
    assert withdraw.result["rate_limit_waits"] >= 1
    [sent] = withdrawals(exchange, "binance", "sender")
    assert sent["client_id"] == withdraw.idempotency_key
    assert exchange.state("binance")["served_418"] == 0

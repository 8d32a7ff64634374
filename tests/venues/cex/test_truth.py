"""Exchange answers that prove less than they claim, and a journal that only moves forward:
each test plays, on the local exchange, what a real exchange (or a stalled worker) did, and
reads the outcome back from the exchange's own books and the movement's audit trail."""

import contextlib
from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from movements.models import (
    MovementAttention,
    MovementEvent,
    MovementRequest,
    MovementRequestNode,
)
from movements.services import execution
from qtg.core.errors import InvalidInput
from reservations.models import Reservation
from tests.execution.conftest import node_path
from tests.movements.drive import node
from tests.venues.cex.conftest import create, drive, story, withdrawals
from venues.cex import journal
from venues.cex.models import CexClock, CexWithdrawal

pytestmark = [pytest.mark.standin, pytest.mark.django_db]

SOURCES = [
    ("binance-sender", "upbit-receiver"),
    ("upbit-sender", "binance-receiver"),
    ("bithumb-sender", "upbit-receiver"),
]


def venue_of(name: str) -> tuple[str, str]:
    kind, account = name.split("-")
    return kind, account


def attentions(request, reason="venue") -> list[MovementAttention]:
    return list(MovementAttention.objects.filter(request=request, reason=reason))


def watch(request, exchange=None, seconds=2.0, deliver=False):
    """Let the workers run for ``seconds``: the movement must not finish meanwhile."""
    with contextlib.suppress(AssertionError):
        drive(
            request,
            exchange,
            until=lambda r: r.request_state in ("COMPLETED", "FAILED"),
            deliver=deliver,
            timeout=seconds,
        )
    request.refresh_from_db()
    return request


def begun(client_id: str, amount: str = "25") -> CexWithdrawal:
    return journal.withdrawal_begin(
        client_id=client_id,
        exchange="test-upbit",
        account="upbit-sender",
        coin="USDT",
        network="ETH",
        address="0x" + "1" * 40,
        amount=Decimal(amount),
        request_id="r",
        node_key="withdraw",
    )


# --- the journal only moves forward ----------------------------------------------------------


def test_a_stalled_process_saving_its_stale_row_does_not_move_the_journal_back():
    row = begun("stalled-1")
    CexWithdrawal.objects.filter(pk=row.pk).update(state="SENT")  # the request left
    stale = CexWithdrawal.objects.get(pk=row.pk)  # what the stalled process holds in memory
    # Meanwhile recovery found the withdrawal and recorded it.
    fresh = CexWithdrawal.objects.get(pk=row.pk)
    journal.withdrawal_answered(fresh, state=journal.State.FOUND, withdrawal_id="w-1")

    # The process wakes up and writes what it believed: the answer was lost.
    journal.withdrawal_answered(stale, state=journal.State.UNKNOWN, error="timed out")

    row.refresh_from_db()
    assert (row.state, row.withdrawal_id) == ("FOUND", "w-1")
    with pytest.raises(RuntimeError):
        stale.save()
    row.refresh_from_db()
    assert (row.state, row.withdrawal_id) == ("FOUND", "w-1")


def test_accepted_is_never_overwritten_and_an_id_never_replaced():
    row = begun("accepted-1")
    assert journal.mark_sent(row, valid_until=None, skew_ms=0)
    assert journal.withdrawal_answered(row, state=journal.State.ACCEPTED, withdrawal_id="w-2")

    assert not journal.withdrawal_answered(row, state=journal.State.UNKNOWN)
    assert not journal.withdrawal_answered(row, state=journal.State.FOUND, withdrawal_id="w-3")
    assert not journal.mark_sent(row, valid_until=None, skew_ms=0)
    row.refresh_from_db()
    assert (row.state, row.withdrawal_id) == ("ACCEPTED", "w-2")


def test_a_withdrawal_id_belongs_to_one_journal_row_of_an_account():
    first, second = begun("one-1"), begun("one-2")
    CexWithdrawal.objects.filter(pk__in=[first.pk, second.pk]).update(state="SENT")
    first.refresh_from_db()
    second.refresh_from_db()
    journal.withdrawal_answered(first, state=journal.State.FOUND, withdrawal_id="w-4")

    with pytest.raises(journal.IdTaken) as taken:
        journal.withdrawal_answered(second, state=journal.State.FOUND, withdrawal_id="w-4")

    assert taken.value.holder.client_id == "one-1"
    second.refresh_from_db()
    assert second.withdrawal_id == ""


def test_recovery_closes_a_row_that_never_passed_the_fence_and_the_fence_then_refuses():
    row = begun("closed-1")
    stale = CexWithdrawal.objects.get(pk=row.pk)
    assert journal.withdrawal_answered(row, state=journal.State.NOT_SENT)

    # The stalled process reaches its fence: the compare-and-set finds the row closed.
    assert not journal.mark_sent(stale, valid_until=None, skew_ms=0)
    assert stale.state == "NOT_SENT"


@pytest.mark.parametrize("source,destination", SOURCES)
def test_a_worker_stalled_before_its_withdrawal_left_sends_nothing_once_recovery_closed_it(
    exchange, creator, source, destination, monkeypatch
):
    # A worker journals the withdrawal (SENDING) and stalls there, past its lease; another
    # worker's reaper and recovery close the row. When the stalled worker wakes, its fence
    # must lose the compare-and-set: nothing reaches the exchange after the movement FAILED.
    kind, account = venue_of(source)
    request = create(creator, source=source, destination=destination)
    claim = execution.claim_ready_node(owner="stalled-worker")
    real_begin = journal.withdrawal_begin

    def begin_then_stall(**fields):
        row = real_begin(**fields)
        MovementRequestNode.objects.filter(pk=claim.node_id).update(
            lease_expires_at=timezone.now() - timedelta(seconds=1)
        )
        execution.reap_expired_leases()
        drive(request, until=lambda r: node(r, "withdraw").node_state != "UNKNOWN")
        return row

    monkeypatch.setattr(journal, "withdrawal_begin", begin_then_stall)

    execution.run_actions([claim])

    request.refresh_from_db()
    assert withdrawals(exchange, kind, account) == [], "the stalled worker sent it anyway"
    withdraw = node(request, "withdraw")
    row = CexWithdrawal.objects.get(client_id=withdraw.idempotency_key)
    assert row.state == "NOT_SENT"
    assert request.request_state == "FAILED", story(request)
    assert "never sent" in withdraw.last_error
    late = MovementEvent.objects.get(node=withdraw, detail__late_result="submit")
    assert "not sent" in late.detail["outcome"]["error"]


# --- odd answers -----------------------------------------------------------------------------


@pytest.mark.parametrize("source,destination", SOURCES)
def test_an_answer_naming_another_withdrawals_id_is_not_taken_for_this_one(
    exchange, creator, source, destination
):
    kind, account = venue_of(source)
    first = drive(create(creator, source=source, destination=destination), exchange)
    assert first.request_state == "COMPLETED", story(first)
    # The exchange makes the second withdrawal but answers with the first one's id.
    exchange.add_fault(kind, "answer_other_id", endpoint="withdraw", times=1)

    second = drive(create(creator, source=source, destination=destination), exchange)

    assert second.request_state == "COMPLETED", story(second)
    made = withdrawals(exchange, kind, account)
    assert len(made) == 2
    ids = {node(first, "withdraw").external_ref, node(second, "withdraw").external_ref}
    assert ids == {w["id"] for w in made}, "each movement completed on its own withdrawal"
    deposits = {node(r, "deposit_observe").external_ref for r in (first, second)}
    assert len(deposits) == 2, "each movement counted its own deposit"
    [asked] = attentions(second)
    assert "proves nothing about this withdrawal" in asked.message


@pytest.mark.parametrize("source,destination", SOURCES)
def test_an_accepted_answer_without_an_id_is_recovered_from_the_exchange(
    exchange, creator, source, destination
):
    kind, account = venue_of(source)
    exchange.add_fault(kind, "empty_accept", endpoint="withdraw", times=1)

    request = drive(create(creator, source=source, destination=destination), exchange)

    assert request.request_state == "COMPLETED", story(request)
    [sent] = withdrawals(exchange, kind, account)
    withdraw = node(request, "withdraw")
    assert withdraw.external_ref == sent["id"]
    assert node_path(request, "withdraw")[-3:] == ["SUBMITTING", "UNKNOWN", "COMPLETED"]


def test_a_withdrawal_completed_then_failed_at_the_exchange_holds_the_movement(exchange, creator):
    request = create(creator, source="binance-sender", destination="upbit-receiver")
    drive(request, until=lambda r: node(r, "withdraw").node_state == "COMPLETED", deliver=False)
    [sent] = withdrawals(exchange, "binance", "sender")
    exchange.settle_withdrawal("binance", id=sent["id"], status="completed")
    drive(
        request,
        until=lambda r: node(r, "withdraw_observe").node_state == "COMPLETED",
        deliver=False,
    )
    # The exchange takes its word back: the withdrawal failed, the money is refunded.
    exchange.settle_withdrawal("binance", id=sent["id"], status="failed", reverse=True)

    request = watch(request, seconds=3)

    assert request.request_state not in ("COMPLETED", "FAILED"), story(request)
    [asked] = attentions(request)
    assert sent["id"] in asked.message and "will not come" in asked.message
    assert Reservation.objects.get(request=request).state == "HELD"


# --- the exchange's clock --------------------------------------------------------------------


def test_upbit_history_is_matched_on_its_own_clock_three_seconds_behind(
    exchange, creator, admin_client, client, settings
):
    # The exchange's clock (and so every record it stamps) is 3 s behind ours; the answer to
    # the withdrawal is lost.
    exchange.configure("upbit", clock_offset_ms=-3000)
    exchange.add_fault(
        "upbit", "timeout_after_accept", endpoint="withdraw", times=1, hold_seconds=3
    )

    request = drive(
        create(creator, source="upbit-sender", destination="binance-receiver"), exchange
    )

    assert request.request_state == "COMPLETED", story(request)
    [sent] = withdrawals(exchange, "upbit", "sender")
    assert node(request, "withdraw").external_ref == sent["id"]
    measured = CexClock.objects.get(account="upbit-sender")
    assert -4500 <= measured.skew_ms <= -1500
    # The measured skew is shown per account.
    page = admin_client.get("/admin/venues/cexclock/")
    assert page.status_code == 200
    assert "upbit-sender" in page.text and f"{measured.skew_ms / 1000:+.3f} s" in page.text
    # ... and scraped as a metric, to alert on before it holds withdrawals back.
    settings.QTG_METRICS_TOKEN = ""
    scraped = client.get("/metrics").content.decode()
    line = (
        f'qtg_exchange_clock_skew_seconds{{account="upbit-sender",exchange="{measured.exchange}"}}'
    )
    [value] = [row.split()[-1] for row in scraped.splitlines() if row.startswith(line)]
    assert float(value) == measured.skew_ms / 1000


def test_too_large_a_clock_skew_holds_withdrawals_back_with_attention(exchange, creator):
    exchange.configure("upbit", clock_offset_ms=20_000)

    request = watch(
        create(creator, source="upbit-sender", destination="binance-receiver"), exchange
    )

    assert request.request_state not in ("COMPLETED", "FAILED"), story(request)
    assert withdrawals(exchange, "upbit", "sender") == []
    assert node(request, "withdraw").node_state in ("READY", "PREPARING")
    [asked] = attentions(request)
    assert "clock" in asked.message


# --- precision and limits at create ------------------------------------------------------


def created(creator, amount, source="binance-sender"):
    from movements.services import movement_create
    from qtg.core.actors import Actor

    return movement_create(
        template="cex_to_cex",
        asset="USDT",
        amount=amount,
        source=source,
        destination="upbit-receiver" if source.startswith("binance") else "binance-receiver",
        params={},
        actor=Actor.for_user(creator),
    )


@pytest.mark.parametrize("source", ["binance-sender", "upbit-sender"])
def test_an_amount_finer_than_the_exchange_allows_is_refused_at_create(exchange, creator, source):
    with pytest.raises(InvalidInput) as refused:
        created(creator, "25.123456789", source=source)

    [reason] = refused.value.details["amount"]
    assert "8 decimal places" in reason
    assert "0.00000001" in reason
    assert refused.value.details["allowed"]["step"] == "0.00000001"
    assert not MovementRequest.objects.exists()
    kind, account = venue_of(source)
    assert withdrawals(exchange, kind, account) == []


def test_an_amount_below_the_exchanges_minimum_is_refused_at_create(exchange, creator):
    with pytest.raises(InvalidInput) as refused:
        created(creator, "1.5")

    assert "below the exchange's minimum withdrawal 2" in refused.value.details["amount"][0]
    assert not MovementRequest.objects.exists()


def test_the_api_answers_a_refused_amount_with_a_400_naming_the_allowed_precision(
    exchange, creator
):
    from rest_framework.test import APIClient

    api = APIClient()
    api.force_authenticate(creator)
    response = api.post(
        "/api/v1/movements/",
        {
            "template": "cex_to_cex",
            "asset": "USDT",
            "amount": "25.123456789",
            "source": "binance-sender",
            "destination": "upbit-receiver",
        },
        format="json",
        HTTP_IDEMPOTENCY_KEY="refused-precision-1",
    )

    assert response.status_code == 400, response.content
    body = response.json()
    assert "8 decimal places" in body["details"]["amount"][0]
    assert body["details"]["allowed"] == {"step": "0.00000001", "minimum": "2", "fee": "1"}
    assert not MovementRequest.objects.exists()
    # Nothing was written: the same key with an amount the exchange allows creates the movement.
    again = api.post(
        "/api/v1/movements/",
        {
            "template": "cex_to_cex",
            "asset": "USDT",
            "amount": "25.12345678",
            "source": "binance-sender",
            "destination": "upbit-receiver",
        },
        format="json",
        HTTP_IDEMPOTENCY_KEY="refused-precision-1",
    )
    assert again.status_code == 201, again.content


def test_an_amount_the_exchange_allows_goes_on_the_wire_exactly(exchange, creator):
    request = drive(create(creator, amount="25.12345678"), exchange)

    assert request.request_state == "COMPLETED", story(request)
    [sent] = withdrawals(exchange, "binance", "sender")
    assert Decimal(sent["amount"]) == Decimal("25.12345678")


def test_a_deposit_counted_for_one_movement_is_never_counted_for_another(exchange, creator):
    request = create(creator, source="binance-sender", destination="upbit-receiver")
    drive(request, until=lambda r: node(r, "withdraw").node_state == "COMPLETED", deliver=False)
    [sent] = withdrawals(exchange, "binance", "sender")
    assert sent["id"] == node(request, "withdraw").external_ref, story(request)
    settled = exchange.settle_withdrawal("binance", id=sent["id"], status="completed")
    # Another movement already counted the deposit this transaction makes.
    journal.claim_deposit(
        account="upbit-receiver",
        txid=settled["txid"],
        deposit_id="",
        request_id="another-movement",
        node_key="deposit_observe",
    )
    exchange.credit_deposit(
        "upbit",
        account="receiver",
        coin="USDT",
        network="ETH",
        amount="24",  # Binance kept its 1 USDT fee
        address=settled["address"],
        txid=settled["txid"],
    )

    request = watch(request, seconds=3)

    assert request.request_state != "COMPLETED", story(request)
    assert attentions(request), story(request)
    [asked] = attentions(request)
    assert "already counted for movement another-movement" in asked.message


# --- absence: proof where the request had a bound, a person where it had none --------------


def test_binance_absence_is_proof_once_the_signed_window_and_the_visibility_window_passed(
    exchange, creator
):
    # The exchange answers 503 to the withdraw request: unclear (it may have acted), UNKNOWN.
    exchange.add_fault("binance", "maintenance", endpoint="withdraw", times=1)

    request = drive(create(creator), exchange, timeout=40)

    assert request.request_state == "FAILED", story(request)
    assert withdrawals(exchange, "binance", "sender") == []
    withdraw = node(request, "withdraw")
    row = CexWithdrawal.objects.get(client_id=withdraw.idempotency_key)
    concluded = node_path(request, "withdraw")[-2:]
    assert concluded == ["UNKNOWN", "FAILED"]
    failed_at = withdraw.events.filter(new_state="FAILED").get().created_at
    assert failed_at >= row.valid_until, "not concluded while the signed request was valid"
    assert Reservation.objects.get(request=request).state == "RELEASED"


def test_upbit_absence_is_never_proof_a_person_is_asked(exchange, creator):
    exchange.add_fault("upbit", "maintenance", endpoint="withdraw", times=1)
    request = create(creator, source="upbit-sender", destination="binance-receiver")

    request = drive(
        request,
        exchange,
        until=lambda r: MovementAttention.objects.filter(request=r).exists(),
        timeout=40,
    )

    assert node(request, "withdraw").node_state == "UNKNOWN", story(request)
    [asked] = MovementAttention.objects.filter(request=request)
    assert asked.reason == "unprovable"
    request = watch(request, exchange, seconds=2)
    assert request.request_state not in ("FAILED", "COMPLETED")
    assert Reservation.objects.get(request=request).state == "HELD"


def test_a_fault_armed_for_one_account_leaves_the_others_alone(exchange, creator):
    exchange.add_fault("binance", "empty_accept", endpoint="withdraw", account="receiver")

    request = drive(create(creator), exchange)

    assert request.request_state == "COMPLETED", story(request)
    assert node_path(request, "withdraw")[-2:] == ["SUBMITTING", "COMPLETED"]
    assert exchange.state("binance")["faults"][0]["account"] == "receiver"

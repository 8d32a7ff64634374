"""A worker paused (SIGSTOP) inside the withdraw submit, its request already at the exchange,
for longer than its lease and the visibility window: real worker processes and beat,
PostgreSQL, the local exchange holding the request before it executes it. Recovery, in
another worker, must not conclude "never happened" meanwhile (Binance: not before the signed
request's window has passed; Upbit: never, from absence alone); it settles the node from
the exchange's evidence while the worker is still paused: one withdrawal, and the movement
completes."""

import os
import signal
import time

import pytest
import yaml

from movements.models import MovementAttention, MovementRequestNode
from movements.states import NodeState, RequestState
from qtg.core.venues import provide_venues
from reservations.models import Reservation, ReservationState
from standins.exchange import LocalExchange
from tests.execution.conftest import Cluster, wait_for
from tests.venues.cex.conftest import (
    ACCOUNTS,
    create,
    credential_env,
    exchanges_yaml,
    standin_config,
    story,
    withdrawals,
)
from venues.cex.models import CexWithdrawal

pytestmark = [
    pytest.mark.standin,
    pytest.mark.slow,
    pytest.mark.postgres,
    pytest.mark.django_db(transaction=True),
]

# The fence let the request go with a lease that outlasts the call's 12 s timeout (by a 2 s
# margin); the worker is paused for longer than that. The exchange holds the request before
# it checks and executes it: Binance 9 s, inside the request's signed window (which ends at
# the call's timeout: once the lease has run out, the window has too, so recovery may then
# read absence as proof, and the exchange has long made the withdrawal); Upbit 18 s, past the
# lease and the accounts' visibility window (6 s), so recovery asks while the exchange still
# holds it and must not conclude "never happened" from absence alone.
HOLD_SECONDS = {"binance": 9, "upbit": 18}
TIMEOUT_SECONDS = 12
PAUSE_SECONDS = 22
# How much longer the worker stays paused, at most, for recovery to settle the node.
SETTLE_SECONDS = 60


@pytest.fixture
def stalled(transactional_db, settings, monkeypatch, tmp_path):
    """The local exchange, two real workers and beat for this test alone: stopped before the
    test's database is flushed, so no worker holds a lock the flush waits for."""
    if not settings.DB_IS_POSTGRES:
        pytest.skip("real worker processes need PostgreSQL")
    with LocalExchange(standin_config(), deliver_after=0.5) as exchange:
        config = tmp_path / "exchanges.yaml"
        config.write_text(
            yaml.safe_dump(exchanges_yaml(exchange.base_url, timeout=TIMEOUT_SECONDS))
        )
        settings.QTG_EXCHANGES_CONFIG = str(config)
        settings.QTG_VENUES = "local"
        settings.QTG_EXECUTOR_DEFAULT_PROVIDER = "venues"
        for name, value in credential_env().items():
            monkeypatch.setenv(name, value)
        provide_venues(list(ACCOUNTS))
        cluster = Cluster(tmp_path, workers=2)
        cluster.env.update(credential_env())
        cluster.env.update({"QTG_VENUES": "local", "QTG_EXCHANGES_CONFIG": str(config)})
        cluster.start()
        try:
            yield exchange, cluster
        finally:
            for pid in cluster.pids():
                os.kill(pid, signal.SIGCONT)  # a paused worker must be able to stop
            cluster.stop()


def _pause_the_worker_while_its_request_is_held(
    exchange, kind, movement
) -> tuple[int, CexWithdrawal]:
    """SIGSTOP the worker whose withdraw request the exchange is holding (it left the
    process: the fence let it go)."""
    wait_for(
        lambda: exchange.state(kind)["held"] >= 1,
        timeout=60,
        interval=0.05,
        message="the withdrawal never reached the exchange",
    )

    def sent():
        node = MovementRequestNode.objects.get(request=movement, node_key="withdraw")
        row = CexWithdrawal.objects.filter(client_id=node.idempotency_key or "-").first()
        return (node, row) if row is not None and row.state != "SENDING" else None

    node, row = wait_for(sent, timeout=60, interval=0.05, message="the withdrawal never left")
    pid = int(node.lease_owner.split(":")[1])
    os.kill(pid, signal.SIGSTOP)
    return pid, row


@pytest.mark.parametrize(
    "source,destination",
    [("binance-sender", "upbit-receiver"), ("upbit-sender", "binance-receiver")],
)
def test_a_worker_paused_inside_its_withdraw_past_lease_and_window_pays_once(
    stalled, creator, source, destination
):
    exchange, _ = stalled
    kind, account = source.split("-")
    exchange.add_fault(
        kind, "slow_before_accept", endpoint="withdraw", hold_seconds=HOLD_SECONDS[kind]
    )
    movement = create(creator, source=source, destination=destination)

    pid, row = _pause_the_worker_while_its_request_is_held(exchange, kind, movement)
    try:
        deadline = time.monotonic() + PAUSE_SECONDS
        while time.monotonic() < deadline:
            movement.refresh_from_db()
            assert movement.request_state != RequestState.FAILED, story(movement)
            held = Reservation.objects.get(request=movement).state
            assert held != ReservationState.RELEASED, story(movement)
            time.sleep(0.5)
        # The lease the fence gave the call (its 12 s timeout, plus a margin) ran out well
        # inside the pause: a reaper (every worker runs one on its own clock) moved the node
        # on, and recovery held back from "never happened".
        withdraw = MovementRequestNode.objects.get(request=movement, node_key="withdraw")
        assert withdraw.node_state in (NodeState.UNKNOWN, NodeState.COMPLETED), story(movement)

        # While the worker stays paused, recovery settles the node from the exchange's
        # evidence (the request was carried out after the hold): COMPLETED, never FAILED or
        # RELEASED on the way.
        settle_by = time.monotonic() + SETTLE_SECONDS
        while True:
            movement.refresh_from_db()
            assert movement.request_state != RequestState.FAILED, story(movement)
            held = Reservation.objects.get(request=movement).state
            assert held != ReservationState.RELEASED, story(movement)
            node = MovementRequestNode.objects.get(request=movement, node_key="withdraw")
            if node.node_state == NodeState.COMPLETED:
                break
            assert time.monotonic() < settle_by, (
                "recovery never settled the withdraw node while its worker was paused\n"
                + _why_not_settled(movement)
            )
            time.sleep(0.5)
    finally:
        os.kill(pid, signal.SIGCONT)

    wait_for(
        lambda: (
            (movement.refresh_from_db() or movement.request_state)
            in (RequestState.COMPLETED, RequestState.FAILED, RequestState.MANUAL_INTERVENTION)
        ),
        timeout=90,
        message="the movement never settled",
    )
    assert movement.request_state == RequestState.COMPLETED, story(movement)
    [made] = withdrawals(exchange, kind, account)
    assert (
        MovementRequestNode.objects.get(request=movement, node_key="withdraw").external_ref
        == (made["id"])
    )
    assert Reservation.objects.get(request=movement).state == ReservationState.CONSUMED
    row.refresh_from_db()
    assert row.withdrawal_id == made["id"]


# The exchange holds the Upbit request until the test releases it, after recovery has asked a
# person (past the lease, the fenced call's 12 s timeout and its margin, and the visibility
# window): at most this long, however slowly a loaded machine lets recovery come.
UNBOUNDED_HOLD_SECONDS = 150
# How long recovery may take, at most, to ask a person once the lease and window have passed.
ASK_SECONDS = 90


def test_an_upbit_withdrawal_held_past_lease_and_window_stays_unknown_until_it_shows(
    stalled, creator
):
    # Upbit's requests carry no validity: while the paused worker's request is still held,
    # recovery finds nothing, and that proves nothing. The node stays UNKNOWN with a person
    # asked; the withdrawal showing up later settles it, still while the worker is paused.
    exchange, _ = stalled
    exchange.add_fault(
        "upbit", "slow_before_accept", endpoint="withdraw", hold_seconds=UNBOUNDED_HOLD_SECONDS
    )
    movement = create(creator, source="upbit-sender", destination="binance-receiver")

    pid, row = _pause_the_worker_while_its_request_is_held(exchange, "upbit", movement)
    try:

        def still_unsettled():
            """Whatever recovery has found so far, absence has proved nothing."""
            movement.refresh_from_db()
            assert movement.request_state != RequestState.FAILED, story(movement)
            held = Reservation.objects.get(request=movement).state
            assert held != ReservationState.RELEASED, story(movement)
            attempts = MovementRequestNode.objects.filter(request=movement, node_key="withdraw")
            assert attempts.count() == 1, "absence was taken for proof: " + story(movement)
            return attempts.get()

        def asked():
            node = still_unsettled()
            assert node.node_state != NodeState.COMPLETED, story(movement)
            return MovementAttention.objects.filter(request=movement, reason="unprovable").first()

        wait_for(
            asked,
            timeout=ASK_SECONDS,
            interval=0.5,
            message=lambda: (
                "nobody was asked while the withdrawal could not be found\n"
                + _why_not_settled(movement)
            ),
        )
        # Asked while the exchange still held the request: there was nothing to find yet.
        assert exchange.state("upbit")["held"] == 1
        assert withdrawals(exchange, "upbit", "sender") == []
        assert still_unsettled().node_state == NodeState.UNKNOWN, story(movement)

        # The exchange carries the request out now; recovery's next look settles the node.
        assert exchange.release_holds("upbit") == 1
        wait_for(
            lambda: still_unsettled().node_state == NodeState.COMPLETED,
            timeout=SETTLE_SECONDS,
            interval=0.5,
            message=lambda: (
                "recovery never settled the withdraw node while its worker was "
                "paused\n" + _why_not_settled(movement)
            ),
        )
    finally:
        os.kill(pid, signal.SIGCONT)

    wait_for(
        lambda: (
            (movement.refresh_from_db() or movement.request_state)
            in (RequestState.COMPLETED, RequestState.FAILED, RequestState.MANUAL_INTERVENTION)
        ),
        timeout=90,
        message="the movement never settled",
    )
    assert movement.request_state == RequestState.COMPLETED, story(movement)
    [made] = withdrawals(exchange, "upbit", "sender")
    row.refresh_from_db()
    assert (row.state, row.withdrawal_id) == ("FOUND", made["id"])
    assert Reservation.objects.get(request=movement).state == ReservationState.CONSUMED


def _why_not_settled(movement) -> str:
    """What a node left in SUBMITTING/UNKNOWN may be waiting for: its lease, and the database
    sessions holding a transaction open (a paused process keeps its row locks) or waiting for
    a lock."""
    from django.db import connection

    node = MovementRequestNode.objects.get(request=movement, node_key="withdraw")
    lines = [
        f"node {node.node_state}: lease {node.lease_owner} until {node.lease_expires_at}, "
        f"fenced until {node.fenced_until}, next attempt {node.next_attempt_at}",
    ]
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pid, state, wait_event_type, now() - xact_start, left(query, 160) "
            "FROM pg_stat_activity WHERE datname = current_database() "
            "AND pid <> pg_backend_pid() "
            "AND (state = 'idle in transaction' OR wait_event_type = 'Lock')"
        )
        lines += [f"session {row}" for row in cursor.fetchall()]
    return "\n".join(lines) + "\n" + story(movement)

"""A real worker paused (SIGSTOP) right before it broadcasts a signed transfer, past its lease,
on anvil with beat and other workers running: recovery re-broadcasts the stored bytes, the
woken worker's own broadcast is the same transaction, and the money moves exactly once."""

import os
import signal
import time

import pytest

from movements.states import NodeState, RequestState
from reservations.models import Reservation, ReservationState
from tests.execution.conftest import node_path, wait_for
from tests.venues.evm.conftest import balance, transfer
from tests.venues.evm.test_processes import cluster, settled  # noqa: F401 (the fixture)
from venues.models import ChainTransaction, TxState

pytestmark = [
    pytest.mark.devchain,
    pytest.mark.slow,
    pytest.mark.postgres,
    pytest.mark.django_db(transaction=True),
]


def _stopped(pid: int) -> bool:
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().split(")")[-1].split()[0] == "T"


def test_a_worker_paused_before_its_broadcast_moves_the_money_once(
    cluster,  # noqa: F811
    devchain,
    tokens,
    creator,
    recipient,
):
    cluster.env["QTG_EVM_PAUSE_AT"] = "before_broadcast"
    paused = cluster.start_worker()
    request = transfer(creator, recipient, amount="7.25")
    wait_for(lambda: _stopped(paused.pid), timeout=60, message="the worker never paused")
    del cluster.env["QTG_EVM_PAUSE_AT"]
    cluster.start_worker()
    try:
        # Its lease expires; the other worker's sweep reaps it and recovery takes over. Read
        # from the node's audit path, not its state now: reaped, recovered and observed, it
        # may pass UNKNOWN and SUBMITTED between two polls (and be COMPLETED by the next).
        wait_for(
            lambda: {NodeState.UNKNOWN, NodeState.SUBMITTED} & set(node_path(request, "transfer")),
            timeout=120,
            message="the paused worker's transfer was never reaped",
        )
        time.sleep(2)
        request.refresh_from_db()
        assert request.request_state not in (RequestState.FAILED, RequestState.CANCELLED)
    finally:
        os.kill(paused.pid, signal.SIGCONT)

    request = settled(request, timeout=120)

    assert request.request_state == RequestState.COMPLETED
    assert balance(devchain, tokens["USDC"], recipient) == 7_250_000
    [tx] = ChainTransaction.objects.filter(movement=request)
    assert tx.state == TxState.FINALIZED
    assert Reservation.objects.get(request=request).state == ReservationState.CONSUMED

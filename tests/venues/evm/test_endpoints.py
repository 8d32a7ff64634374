"""Several RPC endpoints for one chain (``rpc_endpoints``): a conclusion of absence drawn from
the primary's answers is put to every endpoint first. A receipt at any of them, an endpoint
that does not answer or one that disagrees: no conclusion. A lagging endpoint (by its head)
is not asked for conclusions."""

import time

import pytest
from django.core.exceptions import ImproperlyConfigured

from movements.models import MovementAttention
from movements.states import RequestState
from standins.anvil import Anvil, free_port
from standins.contracts import send_transaction
from tests.execution.conftest import node_path, run_workers_once
from tests.movements.drive import node
from tests.venues.evm.conftest import CHAIN_ID, settle, transfer
from venues.evm.config import parse_chain
from venues.models import ChainTransaction, TxState

pytestmark = [pytest.mark.devchain, pytest.mark.django_db]
S = TxState
OTHER_ENV = "QTG_TEST_DEVCHAIN_RPC_URL_B"


def chain_txs(request):
    return list(ChainTransaction.objects.filter(movement=request).order_by("id"))


def nonce_taken_by_a_foreign_transaction(devchain, creator, recipient, **params):
    """A native transfer whose nonce another holder of the key spends first on the primary:
    returns the movement and our (dropped from the mempool) transaction."""
    treasury = devchain.accounts[1]
    with devchain.manual_mining():
        request = transfer(creator, recipient, asset="ETH", amount="0.25", **params)
        for _ in range(200):
            run_workers_once()
            pending = [t for t in chain_txs(request) if t.state == S.PENDING]
            if pending:
                break
        [ours] = pending
        devchain.drop_transaction(ours.tx_hash)
        send_transaction(
            devchain.web3,
            treasury,
            {"to": treasury.address, "value": 0, "nonce": ours.nonce},
            wait=False,
        )
        devchain.mine()
    return request, ours


def run_for(seconds, chain):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        run_workers_once()
        chain.mine()
        time.sleep(0.05)


def cross_checks(tx):
    return [
        e.evidence["nonce_spent"]["cross_check"]
        for e in tx.events.filter(evidence__nonce_spent__has_key="cross_check").order_by("id")
    ]


def test_a_receipt_at_another_endpoint_keeps_a_transfer_from_being_dropped(
    devchain, tokens, chain_config, fast_worker, creator, recipient, monkeypatch
):
    # A second node of the chain that mined ours where the primary has the foreign one.
    with Anvil(chain_id=CHAIN_ID) as other:
        monkeypatch.setenv(OTHER_ENV, other.url)
        chain_config(rpc_endpoints=[OTHER_ENV], broadcast_window_seconds=1)
        request, ours = nonce_taken_by_a_foreign_transaction(devchain, creator, recipient)
        other.rpc("anvil_setNonce", ours.sender, hex(ours.nonce))
        other.rpc("eth_sendRawTransaction", ours.raw_signed)

        run_for(5, devchain)

        ours.refresh_from_db()
        assert ours.state not in (S.DROPPED, S.FAILED)
        assert "FAILED" not in node_path(request, "transfer")
        request.refresh_from_db()
        assert request.request_state == RequestState.EXECUTING
        assert request.reservation.state == "HELD"
        [check, *_] = cross_checks(ours)
        assert check["receipt_anywhere"] is True
        seen = [a for a in check["endpoints"] if a["endpoint"] == OTHER_ENV]
        assert seen[0]["receipt"]["tx_hash"] == ours.tx_hash
        # The endpoints disagree about the chain: a person is told at once.
        told = MovementAttention.objects.get(request=request, reason="venue")
        assert "another endpoint serves a receipt of ours" in told.message


def test_an_endpoint_that_does_not_answer_keeps_a_transfer_from_being_dropped(
    devchain, tokens, chain_config, fast_worker, creator, recipient, monkeypatch
):
    monkeypatch.setenv(OTHER_ENV, f"http://127.0.0.1:{free_port()}")
    chain_config(rpc_endpoints=[OTHER_ENV], broadcast_window_seconds=1)
    request, ours = nonce_taken_by_a_foreign_transaction(devchain, creator, recipient)

    run_for(4, devchain)

    ours.refresh_from_db()
    assert ours.state != S.DROPPED
    assert node(request, "transfer").node_state != "FAILED"
    [check, *_] = cross_checks(ours)
    assert check["contradiction"] == f"{OTHER_ENV} did not answer"


def test_a_lagging_endpoint_is_not_asked_and_the_others_conclude(
    devchain, tokens, chain_config, fast_worker, creator, recipient, monkeypatch
):
    from standins.rpc_proxy import LossyRpcProxy

    with LossyRpcProxy(devchain.url) as behind:
        # Its head 40 blocks back: it has not seen the nonce used at all.
        behind.trail_head(40)
        monkeypatch.setenv(OTHER_ENV, behind.url)
        chain_config(rpc_endpoints=[OTHER_ENV], broadcast_window_seconds=1, max_head_lag_blocks=3)
        request, ours = nonce_taken_by_a_foreign_transaction(devchain, creator, recipient)

        request = settle(request, devchain)

    ours.refresh_from_db()
    assert ours.state == S.DROPPED
    assert request.request_state == RequestState.FAILED
    dropped = ours.events.get(to_state=S.DROPPED).evidence["nonce_spent"]["cross_check"]
    assert dropped["contradiction"] is None and dropped["receipt_anywhere"] is False
    lagging = {a["endpoint"]: a["lagging"] for a in dropped["endpoints"]}
    assert lagging[OTHER_ENV] is True
    assert True not in [v for k, v in lagging.items() if k != OTHER_ENV]


def test_one_endpoint_stays_the_config_and_a_repeated_or_bad_endpoint_is_refused():
    base = {
        "kind": "evm",
        "chain_id": 1,
        "rpc_url_env": "A",
        "block_seconds": 12,
        "replace_after_seconds": 60,
        "max_fee_gwei": 100,
    }
    one = parse_chain("c", base)
    assert one.endpoint_envs == ("A",) and one.max_head_lag_blocks == 3
    several = parse_chain("c", {**base, "rpc_endpoints": ["B", "C"], "max_head_lag_blocks": 5})
    assert several.endpoint_envs == ("A", "B", "C") and several.max_head_lag_blocks == 5
    for bad in (["A"], ["B", "B"], "B", [""]):
        with pytest.raises(ImproperlyConfigured):
            parse_chain("c", {**base, "rpc_endpoints": bad})

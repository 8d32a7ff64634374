"""evm_transfer on anvil through the real worker services (the sweeps beat triggers, run
in-process): balances, the chain-transaction table and the node's history."""

import pytest

from movements.models import MovementAttention, MovementRequestNode
from movements.services import movement_create
from movements.states import NodeState, RequestState
from qtg.core.actors import Actor
from reservations.models import Reservation
from standins.contracts import transact
from tests.execution.conftest import assert_history_replays, node_path, run_workers_once
from tests.movements.drive import node
from tests.venues.evm.conftest import balance, settle, transfer
from venues.models import ChainTransaction, TxState

pytestmark = [pytest.mark.devchain, pytest.mark.django_db]
S = TxState


def chain_txs(request):
    return list(ChainTransaction.objects.filter(movement=request).order_by("id"))


def states_of(tx):
    return [e.to_state for e in tx.events.order_by("id")]


def attention_reasons(request):
    return set(MovementAttention.objects.filter(request=request).values_list("reason", flat=True))


def run_until(predicate, *, turns=200, each=None):
    for _ in range(turns):
        run_workers_once()
        if each is not None:
            each()
        value = predicate()
        if value:
            return value
    raise AssertionError(
        "the condition never held: "
        + str([(t.state, t.tx_hash[:10]) for t in ChainTransaction.objects.all()])
        + str(list(MovementRequestNode.objects.values_list("node_key", "node_state", "last_error")))
    )


def test_an_erc20_transfer_completes_at_finality_and_moves_the_amount_once(
    devchain, tokens, chain_config, fast_worker, creator, recipient
):
    usdc = tokens["USDC"]
    treasury = devchain.accounts[1].address
    before = balance(devchain, usdc, treasury)

    request = settle(transfer(creator, recipient, amount="12.345678"), devchain)

    assert request.request_state == RequestState.COMPLETED
    assert balance(devchain, usdc, recipient) == 12_345_678
    assert balance(devchain, usdc, treasury) == before - 12_345_678
    [tx] = chain_txs(request)
    assert tx.state == S.FINALIZED
    assert tx.confirmations >= 3
    assert node(request, "transfer").external_ref == tx.tx_hash
    assert states_of(tx) == ["CREATED", "SIGNED", "BROADCAST", "CONFIRMED", "FINALIZED"]
    assert node_path(request, "transfer")[-2:] == ["OBSERVING", "COMPLETED"]
    assert node(request, "transfer_observe").result["confirmations"] >= 3
    assert_history_replays(request)


def test_an_18_decimal_token_and_the_native_coin_move_exactly(
    devchain, tokens, chain_config, fast_worker, creator, recipient
):
    # (15 significant digits at most: what the embedded SQLite stores exactly)
    dai = settle(transfer(creator, recipient, asset="DAI", amount="0.000123456789012345"), devchain)
    eth_before = devchain.web3.eth.get_balance(recipient)
    eth = settle(transfer(creator, recipient, asset="ETH", amount="1.00000000000001"), devchain)

    assert dai.request_state == eth.request_state == RequestState.COMPLETED
    assert balance(devchain, tokens["DAI"], recipient) == 123456789012345
    assert devchain.web3.eth.get_balance(recipient) - eth_before == 10**18 + 10**4
    # One sender, one nonce each, in order.
    first, second = chain_txs(dai)[0], chain_txs(eth)[0]
    assert second.nonce == first.nonce + 1


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"amount": "1.1234567"}, "more decimals than the token's 6"),
        ({"asset": "USDT"}, "no token 'USDT'"),
        ({"chain": "elsewhere"}, "no EVM chain 'elsewhere'"),
    ],
)
def test_a_transfer_the_chain_could_never_carry_out_is_refused_at_create(
    devchain, chain_config, creator, recipient, fields, message
):
    params = {"chain": fields.pop("chain")} if "chain" in fields else {}

    request = transfer(creator, recipient, approve=False, **fields, **params)

    assert_refused(request, message)


def assert_refused(request, message):
    """Failed validation: the reason given, no node planned, nothing held."""
    assert request.request_state == RequestState.FAILED
    assert message in request.failure_reason
    assert not request.nodes.exists()
    assert not Reservation.objects.filter(request=request).exists()


def test_an_unconfigured_account_is_refused_at_create(devchain, chain_config, creator, recipient):
    request = movement_create(
        template="evm_transfer",
        asset="USDC",
        amount="1",
        source=recipient,
        destination=recipient,
        params={"chain": "devchain"},
        actor=Actor.for_user(creator),
    )

    assert_refused(request, "no account")


def test_a_stuck_transaction_is_replaced_by_a_fee_bump_and_the_node_takes_the_winner(
    devchain, tokens, chain_config, fast_worker, creator, recipient
):
    chain_config(replace_after_seconds=0.5)
    with devchain.manual_mining():
        request = transfer(creator, recipient, amount="5")
        # Nothing is mined: the original waits in the mempool until it is bumped.
        run_until(lambda: len(chain_txs(request)) == 2, turns=500)
        original, replacement = chain_txs(request)
        assert replacement.replaces_id == original.pk
        assert replacement.nonce == original.nonce
        assert replacement.max_fee_per_gas >= original.max_fee_per_gas * 11 / 10
        assert replacement.max_priority_fee_per_gas >= original.max_priority_fee_per_gas * 11 / 10
        assert devchain.pending_transaction_hashes() == [replacement.tx_hash]

    request = settle(request, devchain)

    original, replacement = chain_txs(request)
    assert request.request_state == RequestState.COMPLETED
    assert original.state == S.REPLACED
    assert replacement.state == S.FINALIZED
    assert node(request, "transfer").external_ref == replacement.tx_hash
    assert balance(devchain, tokens["USDC"], recipient) == 5_000_000
    completed = node(request, "transfer").events.get(new_state=NodeState.COMPLETED)
    assert completed.detail["replaced_external_ref"] == original.tx_hash
    assert S.FAILED not in states_of(original)


def test_a_fee_bump_above_the_cap_is_not_sent_and_an_operator_is_told(
    devchain, tokens, chain_config, fast_worker, creator, recipient
):
    chain_config(replace_after_seconds=0.5, max_fee_gwei=50)
    with devchain.manual_mining():
        request = transfer(creator, recipient, amount="5")
        run_until(lambda: any(tx.state == S.PENDING for tx in chain_txs(request)))
        # The base fee jumps past what the transaction (and the cap) will pay: it is stuck.
        devchain.set_next_block_base_fee(200 * 10**9)
        devchain.mine()

        run_until(lambda: "fee_cap" in attention_reasons(request))

        assert len(chain_txs(request)) == 1
        assert chain_txs(request)[0].state == S.PENDING
        assert node(request, "transfer").node_state == NodeState.OBSERVING


def test_a_dropped_transaction_is_re_broadcast_from_its_stored_bytes(
    devchain, tokens, chain_config, fast_worker, creator, recipient
):
    with devchain.manual_mining():
        request = transfer(creator, recipient, amount="7")
        [tx] = run_until(lambda: [t for t in chain_txs(request) if t.state == S.PENDING])
        assert devchain.drop_transaction(tx.tx_hash) == tx.tx_hash
        assert devchain.pending_transaction_hashes() == []

        run_until(lambda: devchain.pending_transaction_hashes() == [tx.tx_hash])

    request = settle(request, devchain)
    [again] = chain_txs(request)
    assert again.pk == tx.pk and again.tx_hash == tx.tx_hash and again.raw_signed == tx.raw_signed
    assert request.request_state == RequestState.COMPLETED
    assert balance(devchain, tokens["USDC"], recipient) == 7_000_000
    rebroadcast = again.events.get(from_state=S.PENDING, to_state=S.BROADCAST)
    assert rebroadcast.evidence["rebroadcast"] == "left the mempool"
    assert "dropped" in attention_reasons(request)


def test_a_reorg_walks_the_transaction_back_and_finality_is_counted_from_the_new_block(
    devchain, tokens, chain_config, fast_worker, creator, recipient
):
    chain_config(confirmations=4)
    request = transfer(creator, recipient, amount="3")
    [tx] = run_until(
        lambda: [t for t in chain_txs(request) if t.state == S.CONFIRMED and t.confirmations >= 2],
        each=devchain.mine,
    )
    old_block, old_hash = tx.block_number, tx.block_hash
    # The blocks from the transaction's on are replaced by blocks without it.
    devchain.reorg(devchain.block_number() - old_block + 1)

    request = settle(request, devchain)

    [tx] = chain_txs(request)
    assert request.request_state == RequestState.COMPLETED
    assert balance(devchain, tokens["USDC"], recipient) == 3_000_000
    walked_back = tx.events.get(from_state=S.CONFIRMED, to_state=S.PENDING)
    assert walked_back.evidence["reorg"]["old_block_hash"] == old_hash
    assert tx.block_hash != old_hash and tx.block_number >= old_block
    finalized = tx.events.get(to_state=S.FINALIZED)
    assert finalized.evidence["block_hash"] == tx.block_hash
    assert "UNKNOWN" in node_path(request, "transfer")
    assert "reorg" in attention_reasons(request)
    assert_history_replays(request)


def test_a_reverting_transfer_fails_with_the_revert_evidence_and_releases_the_reservation(
    devchain, tokens, chain_config, fast_worker, creator, recipient
):
    usdc, owner = tokens["USDC"], devchain.accounts[0]
    with devchain.manual_mining():
        request = transfer(creator, recipient, amount="2")
        run_until(lambda: any(tx.state == S.PENDING for tx in chain_txs(request)))
        # Mined first (a higher tip): the token blocks transfers, so ours reverts.
        transact(
            devchain.web3,
            owner,
            usdc.functions.setTransfersBlocked(True),
            wait=False,
            gas=100_000,
            maxPriorityFeePerGas=50 * 10**9,
            maxFeePerGas=200 * 10**9,
        )
        devchain.mine()

    request = settle(request, devchain)

    [tx] = chain_txs(request)
    assert request.request_state == RequestState.FAILED
    assert tx.state == S.FAILED and tx.fee_paid > 0
    failed = node(request, "transfer").events.get(new_state=NodeState.FAILED)
    assert "transfers are blocked" in failed.detail["revert_reason"]
    assert balance(devchain, usdc, recipient) == 0
    assert request.reservation.state == "RELEASED"


@pytest.fixture
def proxy(devchain, chain_config, monkeypatch):
    """The chain reached through a proxy that can lose answers (1 s RPC timeout)."""
    from tests.venues.evm.conftest import RPC_ENV
    from tests.venues.evm.rpc_proxy import RPCProxy

    with RPCProxy(devchain.url, hold_seconds=1.5) as running:
        monkeypatch.setenv(RPC_ENV, running.url)
        chain_config(rpc_timeout_seconds=1, broadcast_window_seconds=1)
        yield running


def test_a_send_whose_answer_times_out_is_found_by_hash_and_completes_once(
    devchain, tokens, proxy, fast_worker, creator, recipient
):
    proxy.stall("eth_sendRawTransaction", times=1, forward=True)

    request = settle(transfer(creator, recipient, amount="4"), devchain)

    assert proxy.stalled == ["eth_sendRawTransaction"]
    assert request.request_state == RequestState.COMPLETED
    path = node_path(request, "transfer")
    assert path[path.index("SUBMITTING") + 1] == "UNKNOWN"
    assert path.count("SUBMITTING") == 1  # never submitted again: recovery found it by hash
    [tx] = chain_txs(request)
    assert tx.state == S.FINALIZED
    assert balance(devchain, tokens["USDC"], recipient) == 4_000_000


def test_reads_that_time_out_while_observing_are_asked_again_without_doubt(
    devchain, tokens, proxy, fast_worker, creator, recipient
):
    request = transfer(creator, recipient, amount="6")
    run_until(lambda: node(request, "transfer").node_state == NodeState.OBSERVING)
    proxy.stall("eth_getTransactionReceipt", times=2, forward=False)

    request = settle(request, devchain)

    assert proxy.stalled == ["eth_getTransactionReceipt"] * 2
    assert request.request_state == RequestState.COMPLETED
    assert "UNKNOWN" not in node_path(request, "transfer")
    assert balance(devchain, tokens["USDC"], recipient) == 6_000_000


def test_only_the_senders_lowest_stuck_nonce_is_bumped(
    devchain, tokens, chain_config, fast_worker, creator, recipient
):
    chain_config(replace_after_seconds=0.5)
    with devchain.manual_mining():
        lower = transfer(creator, recipient, amount="1")
        higher = transfer(creator, recipient, amount="2")
        run_until(lambda: len(chain_txs(lower)) == 2, turns=500)
        for _ in range(5):
            run_workers_once()

        assert len(chain_txs(higher)) == 1
        assert node(higher, "transfer").result["waiting_for_nonce"] == chain_txs(lower)[0].nonce

    for request in (lower, higher):
        assert settle(request, devchain).request_state == RequestState.COMPLETED
    assert balance(devchain, tokens["USDC"], recipient) == 3_000_000


def test_the_movement_page_lists_its_chain_transactions_and_their_admin_is_read_only(
    devchain, tokens, chain_config, fast_worker, creator, recipient, admin_client
):
    request = settle(transfer(creator, recipient, amount="1"), devchain)
    [tx] = chain_txs(request)

    page = admin_client.get(f"/admin/movements/movementrequest/{request.pk}/change/")
    detail = admin_client.get(f"/admin/venues/chaintransaction/{tx.pk}/change/")

    assert page.status_code == 200
    assert tx.tx_hash in page.content.decode() and "FINALIZED" in page.content.decode()
    assert detail.status_code == 200 and b'name="_save"' not in detail.content
    assert b"CONFIRMED" in detail.content  # its audit trail
    assert admin_client.get("/admin/venues/chaintransaction/add/").status_code == 403


def test_a_nonce_taken_by_a_transaction_qtg_did_not_sign_drops_the_transfer_and_fails_it(
    devchain, tokens, chain_config, fast_worker, creator, recipient
):
    from standins.contracts import send_transaction

    chain_config(broadcast_window_seconds=1)
    treasury = devchain.accounts[1]
    with devchain.manual_mining():
        request = transfer(creator, recipient, amount="8")
        [ours] = run_until(lambda: [t for t in chain_txs(request) if t.state == S.PENDING])
        devchain.drop_transaction(ours.tx_hash)
        # Someone else holding the key spends the nonce first.
        send_transaction(
            devchain.web3,
            treasury,
            {"to": treasury.address, "value": 0, "nonce": ours.nonce},
            wait=False,
        )
        devchain.mine()

    request = settle(request, devchain)

    [ours] = chain_txs(request)
    assert ours.state == S.DROPPED
    assert request.request_state == RequestState.FAILED
    assert balance(devchain, tokens["USDC"], recipient) == 0
    assert "dropped" in attention_reasons(request)
    assert node_path(request, "transfer")[-2:] == ["UNKNOWN", "FAILED"]


def test_a_broadcast_the_network_never_sees_is_re_sent_from_its_bytes_after_its_window(
    devchain, tokens, proxy, fast_worker, creator, recipient
):
    # The node answers the send with the hash and never passes the transaction on.
    proxy.stall("eth_sendRawTransaction", times=1, forward="swallow")
    request = transfer(creator, recipient, amount="5.5")
    [tx] = run_until(lambda: [t for t in chain_txs(request) if t.state == S.BROADCAST])
    assert devchain.web3.eth.get_transaction_count(devchain.accounts[1].address) == tx.nonce

    request = settle(request, devchain, timeout=30)

    [again] = chain_txs(request)
    assert again.tx_hash == tx.tx_hash and again.state == S.FINALIZED
    resent = again.events.get(from_state=S.BROADCAST, to_state=S.BROADCAST)
    assert resent.evidence["rebroadcast"] == "not seen within the broadcast window"
    assert (resent.at - tx.broadcast_at).total_seconds() >= 1  # its broadcast window
    # Handed to a node is not known to the network: never PENDING before the re-send.
    assert states_of(again)[:4] == ["CREATED", "SIGNED", "BROADCAST", "BROADCAST"]
    assert balance(devchain, tokens["USDC"], recipient) == 5_500_000


def test_a_transaction_re_included_by_a_reorg_is_confirmed_again_in_its_new_block(
    devchain, tokens, chain_config, fast_worker, creator, recipient
):
    chain_config(confirmations=4)
    request = transfer(creator, recipient, amount="3.25")
    [tx] = run_until(
        lambda: [t for t in chain_txs(request) if t.state == S.CONFIRMED and t.confirmations >= 2],
        each=devchain.mine,
    )
    old_hash = tx.block_hash
    # The replacement blocks carry the same transaction, at the same height.
    devchain.reorg(devchain.block_number() - tx.block_number + 1, [(tx.raw_signed, 0)])

    request = settle(request, devchain)

    [tx] = chain_txs(request)
    assert request.request_state == RequestState.COMPLETED
    assert tx.block_hash != old_hash
    back = tx.events.get(from_state=S.CONFIRMED, to_state=S.PENDING)
    assert back.evidence["reorg"]["now_in_block"] == tx.block_hash
    # Found in its new block: confirmed again, never re-sent.
    assert not tx.events.filter(evidence__has_key="rebroadcast").exists()
    assert balance(devchain, tokens["USDC"], recipient) == 3_250_000
    assert "reorg" in attention_reasons(request)

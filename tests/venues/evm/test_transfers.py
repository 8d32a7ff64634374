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
from tests.venues.pages import chain_transaction_page, fee_text
from venues.evm.family import evm_fees
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
        bumped, was = evm_fees(replacement), evm_fees(original)
        assert bumped["max_fee_per_gas"] >= was["max_fee_per_gas"] * 11 / 10
        assert bumped["max_priority_fee_per_gas"] >= was["max_priority_fee_per_gas"] * 11 / 10
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
    # Concluded only after every endpoint was asked: their answers are the evidence.
    assert walked_back.evidence["reorg"]["endpoints"]
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
    assert path.count("SUBMITTING") == 1  # never submitted again: found by its hash at once
    assert "UNKNOWN" not in path
    [tx] = chain_txs(request)
    assert tx.state == S.FINALIZED
    assert tx.events.get(to_state=S.BROADCAST).evidence["found_by_hash"] is True
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
    # Concluded on the chain's facts: the nonce used by the other transaction at finality,
    # seen so at two looks a window apart.
    dropped = ours.events.get(to_state=S.DROPPED).evidence["nonce_spent"]
    assert dropped["ours"] is False and dropped["by"] != ours.tx_hash
    assert dropped["nonce_finalized"] > ours.nonce
    assert dropped["block"]["number"] <= dropped["finalized"]["number"]
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


@pytest.fixture
def lagging(devchain, chain_config, monkeypatch):
    """The chain reached through the stand-in proxy that can lag lookups and trail its
    finalized tag."""
    from standins.rpc_proxy import LossyRpcProxy
    from tests.venues.evm.conftest import RPC_ENV

    with LossyRpcProxy(devchain.url) as running:
        monkeypatch.setenv(RPC_ENV, running.url)
        chain_config(broadcast_window_seconds=1)
        yield running


def test_a_lagging_backend_never_drops_a_mined_transfer(
    devchain, tokens, lagging, fast_worker, creator, recipient
):
    import time

    with devchain.manual_mining():
        request = transfer(creator, recipient, amount="7")
        [tx] = run_until(lambda: [t for t in chain_txs(request) if t.state == S.PENDING])
        # Mined, and the backend answers "not found" for its receipt and body for a while.
        lagging.lag_lookups(tx.tx_hash, seconds=6)
        devchain.mine()
        deadline = time.monotonic() + 4
        while time.monotonic() < deadline:
            run_workers_once()
            time.sleep(0.05)
        assert lagging.lagged, "the backend never lagged"
        tx.refresh_from_db()
        assert tx.state not in (S.DROPPED, S.FAILED)

    request = settle(request, devchain, timeout=40)

    [tx] = chain_txs(request)
    assert request.request_state == RequestState.COMPLETED
    assert tx.state == S.FINALIZED
    assert not tx.events.filter(to_state=S.DROPPED).exists()
    assert "UNKNOWN" not in node_path(request, "transfer")
    assert request.reservation.state == "CONSUMED"
    assert balance(devchain, tokens["USDC"], recipient) == 7_000_000
    # What the look that found it mined, while its lookups said "not found", answered at.
    sighting = tx.events.filter(evidence__has_key="nonce_spent").first()
    assert sighting is not None
    spent = sighting.evidence["nonce_spent"]
    assert spent["by"] == tx.tx_hash and spent["ours"] is True
    assert spent["head"]["number"] >= spent["block"]["number"]
    assert spent["nonce_latest"] > tx.nonce


def test_finalized_only_at_the_chains_finalized_block_however_deep_the_transaction(
    devchain, tokens, lagging, chain_config, fast_worker, creator, recipient
):
    # The reviewed policy: the chain's own finalized block. The README's old example asked
    # only for a depth (confirmations: 3 here): far above the checkpoint.
    chain_config(finality="tag", confirmations=3, broadcast_window_seconds=1)
    lagging.trail_finalized(20)
    request = transfer(creator, recipient, amount="2")
    [tx] = run_until(
        lambda: [t for t in chain_txs(request) if t.confirmations >= 10], each=devchain.mine
    )
    assert tx.state == S.CONFIRMED  # 10 blocks deep, above the finalized block
    assert node(request, "transfer").node_state != "COMPLETED"

    request = settle(request, devchain, timeout=60)

    [tx] = chain_txs(request)
    assert request.request_state == RequestState.COMPLETED and tx.state == S.FINALIZED
    final = tx.events.get(to_state=S.FINALIZED).evidence
    assert final["finalized_block"]["number"] >= tx.block_number
    assert final["head"] - final["finalized_block"]["number"] >= 19  # the tag trailed
    assert tx.confirmations >= 21
    assert balance(devchain, tokens["USDC"], recipient) == 2_000_000


@pytest.mark.parametrize(
    ("finality", "problem"),
    [
        ({"depth": 12}, "needs a reason"),
        ({"tag": False}, "the tag, a depth, or both"),
        ("latest", "finality must be"),
        ({"tag": True, "confirmations": 3}, "finality must be"),
    ],
)
def test_a_finality_policy_that_does_not_say_why_or_what_is_refused(finality, problem):
    from django.core.exceptions import ImproperlyConfigured

    from venues.evm.config import parse_chain

    entry = {
        "kind": "evm",
        "chain_id": 1,
        "rpc_url_env": "X",
        "finality": finality,
        "block_seconds": 12,
        "replace_after_seconds": 180,
        "max_fee_gwei": 300,
    }
    with pytest.raises(ImproperlyConfigured, match=problem):
        parse_chain("ethereum", entry)


def test_the_finality_policies_of_the_reviewed_config():
    from venues.evm.config import parse_chain

    base = {"kind": "evm", "chain_id": 1, "rpc_url_env": "X", "block_seconds": 12}
    base |= {"replace_after_seconds": 180, "max_fee_gwei": 300}
    tag = parse_chain("a", {**base, "finality": "tag"}).finality
    depth = parse_chain("b", {**base, "finality": {"depth": 64, "reason": "tag reorged"}})
    both = parse_chain("c", {**base, "finality": {"tag": True, "depth": 5, "reason": "r"}})
    legacy = parse_chain("d", {**base, "confirmations": 12}).finality

    assert tag.reached(number=100, head=100, finalized=100)
    assert not tag.reached(number=101, head=500, finalized=100)
    assert not tag.reached(number=1, head=500, finalized=None)
    assert depth.finality.reached(number=100, head=163, finalized=None)
    assert not depth.finality.reached(number=100, head=162, finalized=10**6)
    assert both.finality.reached(number=100, head=104, finalized=100)
    assert not both.finality.reached(number=100, head=103, finalized=100)
    assert not both.finality.reached(number=100, head=110, finalized=99)
    # A legacy depth alone is never less final than the chain's checkpoint.
    assert (legacy.tag, legacy.depth) == (True, 12)
    assert not legacy.reached(number=100, head=200, finalized=99)


def test_an_original_mined_after_a_reorg_took_its_winning_bump_is_the_winner(
    devchain, tokens, chain_config, fast_worker, creator, recipient
):
    chain_config(replace_after_seconds=0.5, confirmations=4)
    with devchain.manual_mining():
        request = transfer(creator, recipient, amount="4.5")
        run_until(lambda: len(chain_txs(request)) == 2, turns=500)
        original, bump = chain_txs(request)
        devchain.mine()  # the bump (higher fees) wins first
        run_until(lambda: {t.state for t in chain_txs(request)} == {S.CONFIRMED, S.REPLACED})
        bump.refresh_from_db()
        assert bump.state == S.CONFIRMED
        # A 1-block reorg: the new block carries the original instead.
        devchain.reorg(1, [(original.raw_signed, 0)])

        request = settle(request, devchain)

    original, bump, *more = chain_txs(request)
    assert more == []  # no replacement signed for a nonce that is used
    assert request.request_state == RequestState.COMPLETED
    assert original.state == S.FINALIZED and bump.state == S.REPLACED
    assert node(request, "transfer").external_ref == original.tx_hash
    back = original.events.get(from_state=S.REPLACED, to_state=S.CONFIRMED)
    assert back.evidence["walked_back"] == "mined after all" and back.evidence["block_hash"]
    assert "fee_cap" not in attention_reasons(request)
    assert balance(devchain, tokens["USDC"], recipient) == 4_500_000


def test_a_future_nonce_refused_by_another_node_implementation_waits_and_pages_nobody(
    devchain, tokens, lagging, fast_worker, creator, recipient
):
    # Hardhat under automine keeps no future queue: it refuses a nonce above the next one.
    lagging.answer_error(
        "eth_sendRawTransaction", "Nonce too high. Expected nonce to be 3 but got 4.", times=2
    )

    request = settle(transfer(creator, recipient, amount="1.5"), devchain, timeout=40)

    assert [m for m, _ in lagging.errored] == ["eth_sendRawTransaction"] * 2
    assert request.request_state == RequestState.COMPLETED
    assert attention_reasons(request) == set()
    [tx] = chain_txs(request)
    assert tx.events.filter(evidence__has_key="nonce_ahead").exists()
    assert balance(devchain, tokens["USDC"], recipient) == 1_500_000


def test_erigons_existing_tx_with_same_hash_is_already_known(
    devchain, tokens, lagging, fast_worker, creator, recipient
):
    # The node took the bytes (a first send whose answer was lost) and says so this way.
    lagging.answer_error(
        "eth_sendRawTransaction", "existing tx with same hash", times=1, forward=True
    )

    request = settle(transfer(creator, recipient, amount="2.5"), devchain, timeout=40)

    assert request.request_state == RequestState.COMPLETED
    assert attention_reasons(request) == set()
    assert "UNKNOWN" not in node_path(request, "transfer")
    [tx] = chain_txs(request)
    assert tx.events.get(to_state=S.BROADCAST).evidence["rpc"] == "known"
    assert balance(devchain, tokens["USDC"], recipient) == 2_500_000


def test_a_token_whose_chain_decimals_differ_from_the_config_is_refused_and_nothing_is_sent(
    devchain, tokens, chain_config, creator, recipient
):
    from django.core import checks

    # The reviewed config says 8; the contract says 6: 5 USDC would have paid 500.
    chain_config(
        tokens={"USDC": {"address": tokens["USDC"].address, "decimals": 8}},
    )

    request = transfer(creator, recipient, amount="5", approve=False)

    assert_refused(request, "has 6 decimals, the reviewed config says 8")
    assert not ChainTransaction.objects.exists()
    assert balance(devchain, tokens["USDC"], recipient) == 0
    problems = [
        e for e in checks.run_checks(include_deployment_checks=True) if e.id == "venues.E025"
    ]
    assert len(problems) == 1 and "has 6 decimals" in problems[0].msg


def test_a_worker_that_lost_the_nodes_lease_broadcasts_nothing(
    devchain, tokens, chain_config, fast_worker, creator, recipient, monkeypatch
):
    import time
    from datetime import timedelta
    from types import SimpleNamespace

    from django.conf import settings
    from django.utils import timezone

    from movements.services.execution import leases

    fence = leases.Fence.__call__
    lost, refused = [], []

    def paused_past_the_lease(self, timeout, then=None):
        if lost:
            return fence(self, timeout, then)
        # This worker paused past its lease, right before the send: the database's clock and
        # the worker's own monotonic clock (which runs through a SIGSTOP) both moved on.
        MovementRequestNode.objects.filter(pk=self.node_id).update(
            lease_expires_at=timezone.now() - timedelta(seconds=1)
        )
        real = time.monotonic
        monkeypatch.setattr(
            leases,
            "time",
            SimpleNamespace(monotonic=lambda: real() + settings.QTG_LEASE_SECONDS),
        )
        lost.append(self.node_id)
        try:
            return fence(self, timeout, then)
        except leases.LeaseLost:
            refused.append(len(devchain.pending_transaction_hashes()))
            raise

    monkeypatch.setattr(leases.Fence, "__call__", paused_past_the_lease)
    with devchain.manual_mining():
        request = transfer(creator, recipient, amount="3")
        run_until(lambda: lost)

    request = settle(request, devchain)

    assert refused == [0]  # the fence refused and nothing had left
    assert request.request_state == RequestState.COMPLETED
    [tx] = chain_txs(request)
    assert tx.events.filter(to_state=S.BROADCAST).count() == 1  # sent once, under a held lease
    assert balance(devchain, tokens["USDC"], recipient) == 3_000_000


def test_the_admin_shows_each_senders_queue(
    devchain, tokens, chain_config, fast_worker, creator, recipient, admin_client
):
    with devchain.manual_mining():
        first = transfer(creator, recipient, amount="1")
        second = transfer(creator, recipient, amount="2")
        run_until(lambda: all(t.state == S.PENDING for t in chain_txs(first) + chain_txs(second)))
        [lowest] = chain_txs(first)

        page = admin_client.get("/admin/venues/noncecursor/")

    html = page.content.decode()
    assert page.status_code == 200
    assert devchain.accounts[1].address in html
    row = html[html.index(devchain.accounts[1].address) :]
    assert f">{lowest.nonce + 2}<" in row  # the next nonce QTG hands out
    assert f">{lowest.nonce}<" in row and ">PENDING<" in row  # what the queue waits behind
    assert ">2<" in row  # two in flight
    assert admin_client.get("/admin/venues/noncecursor/add/").status_code == 403


def test_a_node_that_keeps_dying_before_it_signs_releases_its_nonce_within_bounded_time(
    devchain, tokens, chain_config, fast_worker, creator, recipient, monkeypatch
):
    from movements.executors.base import TransientError
    from venues.evm import executors

    chain_config(unsigned_release_seconds=1)
    real_sign = executors.EvmTransfer.sign
    dying = set()

    def dies_before_signing(self, ctx):
        if ctx.request_id in dying:
            # As a worker killed before it signs: the node is tried again, never ends (a
            # death spends no budget, so this is a wait, not a venue error that could end it
            # FAILED on a slow machine before the filler's bound).
            raise TransientError("worker killed before it signed", retry_after=0)
        return real_sign(self, ctx)

    monkeypatch.setattr(executors.EvmTransfer, "sign", dies_before_signing)
    with devchain.manual_mining():
        stuck = transfer(creator, recipient, amount="1", approve=False)
        dying.add(str(stuck.pk))
        from movements.services import movement_approve

        movement_approve(request=stuck, actor=Actor.system("tests-approver"))
        [held] = run_until(lambda: [t for t in chain_txs(stuck) if t.state == S.CREATED])
        behind = transfer(creator, recipient, amount="2")
        run_until(lambda: any(t.state == S.PENDING for t in chain_txs(behind)))

    # The later transfer completes: the held nonce was filled after the bound.
    behind = settle(behind, devchain, timeout=40)
    assert behind.request_state == RequestState.COMPLETED
    held.refresh_from_db()
    assert held.state == S.REPLACED and held.tx_hash == ""
    filler = ChainTransaction.objects.get(replaces=held, purpose="nonce_fill")
    assert filler.state == S.FINALIZED and filler.nonce == held.nonce
    assert "held unsigned by a live node" in held.events.last().evidence["orphaned"]

    dying.clear()  # the node's worker survives at last: it signs with a new nonce
    stuck = settle(stuck, devchain, timeout=40)
    assert stuck.request_state == RequestState.COMPLETED
    [new] = [t for t in chain_txs(stuck) if t.pk != held.pk]
    assert new.state == S.FINALIZED and new.nonce > chain_txs(behind)[0].nonce
    assert balance(devchain, tokens["USDC"], recipient) == 3_000_000


def test_the_console_reads_an_erc20_and_a_native_transfer(
    devchain, tokens, chain_config, fast_worker, creator, recipient, client
):
    """Issue 31: the transaction's page decodes its call (ERC-20 transfer to X of Y, a native
    transfer), links the explorer the reviewed config names, and shows the fee in ETH and
    gwei and the depth against the finality policy."""
    chain_config(explorer_tx_url="https://explorer.example/tx/{tx}?net=dev")
    token = settle(transfer(creator, recipient, amount="1234.5"), devchain)
    native = settle(transfer(creator, recipient, asset="ETH", amount="0.25"), devchain)
    [erc20], [coin] = chain_txs(token), chain_txs(native)

    text, html = chain_transaction_page(client, erc20)
    assert f"ERC-20 transfer of 1,234.5 USDC to {recipient}" in text
    assert f"function transfer(address,uint256) contract {tokens['USDC'].address}" in text
    assert f'href="https://explorer.example/tx/{erc20.tx_hash}?net=dev"' in html
    assert fee_text(erc20.fee_paid) in text
    assert f"{erc20.confirmations} of 3 required" in text
    assert f"gas limit: {evm_fees(erc20)['gas_limit']:,}" in text

    text, _ = chain_transaction_page(client, coin)
    assert f"Transfer of 0.25 ETH to {recipient}" in text
    assert "amount 0.25 ETH" in text


def test_a_broadcast_is_fenced_for_the_chains_rpc_timeout_so_a_dead_worker_hands_over_soon(
    devchain, tokens, chain_config, fast_worker, creator, recipient, monkeypatch, settings
):
    """The node's lease, when the signed bytes leave, outlasts the broadcast call (the chain's
    5 s RPC timeout) by the fence's margins and no more: a worker that dies with the call out
    leaves its node to recovery about 8 s later, not after a generic 30 s call timeout."""
    from venues.evm.tx import broadcast

    settings.QTG_LEASE_SECONDS = 5  # the real-process tests' lease: shorter than the fence
    leases = []
    send = broadcast.send_stored

    def watched(w3, tx):
        row = MovementRequestNode.objects.get(pk=tx.node_id)
        leases.append((row.fenced_at, row.fenced_until, row.lease_expires_at))
        return send(w3, tx)

    monkeypatch.setattr(broadcast, "send_stored", watched)

    request = settle(transfer(creator, recipient, amount="2"), devchain)

    assert request.request_state == RequestState.COMPLETED
    [(fenced_at, fenced_until, lease_expires_at)] = leases
    assert 5 <= (fenced_until - fenced_at).total_seconds() <= 5 + 1
    assert (lease_expires_at - fenced_at).total_seconds() <= 5 + 1 + 2 + 0.5

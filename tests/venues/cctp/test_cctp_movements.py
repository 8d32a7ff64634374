"""The ``cctp`` template on the real path: burn on devchain A, attestation from the Iris
stand-in, mint on devchain B, through the real worker services (in-process sweeps) with
QTG_VENUES choosing the venues' executors."""

import itertools
import re
import time
from decimal import Decimal

import pytest
from web3.logs import DISCARD

from movements.models import MovementAttention, MovementEvent
from movements.services import movement_approve, movement_create
from movements.states import TERMINAL_REQUEST_STATES, NodeState, RequestState
from qtg.core.actors import Actor
from qtg.core.venues import provide_venues
from standins.cctp import Message
from standins.rpc_proxy import LossyRpcProxy
from tests.execution.conftest import assert_history_replays, node_path, run_workers_once
from tests.movements.drive import node
from tests.venues.pages import ONE_FORMAT, chain_transaction_page, fee_text
from venues.models import ChainTransaction, TxState

from .conftest import DOMAIN_A, TREASURY, USDC, VAULT

pytestmark = [pytest.mark.devchain, pytest.mark.standin, pytest.mark.django_db]

AMOUNT = "25.500001"
UNITS = 25_500_001


@pytest.fixture
def venues_on(settings, chains_config):
    settings.QTG_VENUES = "local"
    settings.QTG_EXECUTOR_DEFAULT_PROVIDER = "venues"
    settings.QTG_OBSERVE_POLL_SECONDS = 0
    settings.QTG_RETRY_BASE_SECONDS = 0
    settings.QTG_RETRY_MAX_SECONDS = 0
    provide_venues([TREASURY, VAULT])


@pytest.fixture
def funded(cctp, chain_a):
    a, _ = cctp
    a.mint_usdc(chain_a.accounts[1].address, 100 * USDC)


@pytest.fixture
def bob(chain_b):
    return chain_b.accounts[2].address


def create(creator, destination, amount=AMOUNT):
    request = movement_create(
        template="cctp",
        asset="USDC",
        amount=amount,
        source=TREASURY,
        destination=destination,
        params={"source_chain": "ethereum", "destination_chain": "arbitrum"},
        actor=Actor.for_user(creator),
    )
    movement_approve(request=request, actor=Actor.system("tests-approver"))
    return request


def run_until(done, chains, *, timeout=60.0, each=None, what=""):
    """Run the sweeps (one pass a turn), mining a block on each chain per turn, until
    ``done()``."""
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise AssertionError(f"not reached within {timeout}s: {what}")
        run_workers_once()
        if each is not None:
            each()
        for chain in chains:
            chain.mine()
        time.sleep(0.01)


def settle(request, chains, *, timeout=60.0, each=None):
    """Run until the movement is terminal or needs a person."""
    targets = {*TERMINAL_REQUEST_STATES, RequestState.MANUAL_INTERVENTION}

    def done():
        request.refresh_from_db()
        return request.request_state in targets

    states = lambda: dict(request.nodes.values_list("node_key", "node_state"))  # noqa: E731
    run_until(done, chains, timeout=timeout, each=each, what=f"settled ({states()})")
    return request


def supply(domain):
    return domain.usdc.functions.totalSupply().call()


def mints(b, nonce):
    """MessageReceived events of ``nonce`` on chain B: one per mint that happened."""
    logs = b.transmitter.events.MessageReceived().get_logs(from_block=0)
    return [log for log in logs if log["args"]["nonce"] == nonce]


def burn_message(request, a):
    burn_tx = node(request, "burn").external_ref
    receipt = a.w3.eth.get_transaction_receipt(burn_tx)
    (event,) = a.transmitter.events.MessageSent().process_receipt(receipt, errors=DISCARD)
    return Message.parse(event["args"]["message"])


def test_happy_path_moves_the_amount_exactly_once_across_both_chains(
    venues_on, funded, cctp, chain_a, chain_b, bob, creator
):
    a, b = cctp
    treasury = chain_a.accounts[1].address
    before_a, supply_a, before_b, supply_b = (
        a.usdc_balance(treasury),
        supply(a),
        b.usdc_balance(bob),
        supply(b),
    )

    request = settle(create(creator, bob), [chain_a, chain_b])

    assert request.request_state == RequestState.COMPLETED
    assert a.usdc_balance(treasury) == before_a - UNITS
    assert supply(a) == supply_a - UNITS  # burned, not parked
    assert b.usdc_balance(bob) == before_b + UNITS
    assert supply(b) == supply_b + UNITS
    message = burn_message(request, a)
    assert message.burn.amount == UNITS
    assert len(mints(b, message.nonce)) == 1
    assert b.is_nonce_used(DOMAIN_A, message.nonce)

    txs = ChainTransaction.objects.filter(movement=request).order_by("id")
    purposes = [(tx.chain, tx.node.node_key if tx.node else "allowance") for tx in txs]
    assert purposes == [("ethereum", "allowance"), ("ethereum", "burn"), ("arbitrum", "mint")]
    assert [tx.state for tx in txs] == [TxState.FINALIZED] * 3
    assert node(request, "burn").external_ref == txs[1].tx_hash
    assert node(request, "attestation_observe").result["message"] == "0x" + message.encode().hex()
    assert node(request, "mint").external_ref == txs[2].tx_hash
    assert node(request, "mint_observe").result["confirmations"] >= 3
    assert_history_replays(request)


def test_a_second_burn_of_the_account_needs_no_new_allowance(
    venues_on, funded, cctp, chain_a, chain_b, bob, creator
):
    _, b = cctp
    vault = chain_b.accounts[4].address
    before = b.usdc_balance(vault)
    first = settle(create(creator, bob, amount="1"), [chain_a, chain_b])
    second = settle(create(creator, VAULT, amount="2"), [chain_a, chain_b])  # an account name

    assert (first.request_state, second.request_state) == (RequestState.COMPLETED,) * 2
    assert b.usdc_balance(vault) == before + 2 * USDC
    assert ChainTransaction.objects.filter(movement=second, node__isnull=True).count() == 0
    nonces = list(
        ChainTransaction.objects.filter(chain="ethereum")
        .order_by("nonce")
        .values_list("nonce", flat=True)
    )
    assert nonces == list(range(nonces[0], nonces[0] + 3))  # allowance, burn, burn: no gap


@pytest.fixture
def lossy_b(chain_b):
    with LossyRpcProxy(chain_b.url) as proxy:
        yield proxy


@pytest.fixture
def rpc_b(lossy_b):
    return lossy_b.url


def test_a_lost_mint_response_is_found_by_its_hash_and_completes_by_itself_minting_once(
    venues_on, funded, cctp, chain_a, chain_b, bob, creator, lossy_b
):
    _, b = cctp
    before = b.usdc_balance(bob)
    # The mint reaches chain B; its answer does not reach the worker.
    lossy_b.lose_response("eth_sendRawTransaction", times=1)

    request = settle(create(creator, bob), [chain_a, chain_b])

    # No person needed: the hash showed at once that the node has it (no doubt, no UNKNOWN).
    assert request.request_state == RequestState.COMPLETED
    assert [method for method, _ in lossy_b.lost] == ["eth_sendRawTransaction"]
    assert NodeState.UNKNOWN not in node_path(request, "mint")
    assert b.usdc_balance(bob) == before + UNITS
    assert len(mints(b, burn_message(request, cctp[0]).nonce)) == 1
    (mint_tx,) = ChainTransaction.objects.filter(movement=request, node__node_key="mint")
    assert node(request, "mint").external_ref == mint_tx.tx_hash
    assert_history_replays(request)


@pytest.mark.parametrize(
    ("fault", "answered"),
    [({"status": 503}, 503), ({"rate_limit": True}, 429)],
    ids=["down-5xx", "rate-limited-429"],
)
def test_attestation_service_down_then_back_completes_after_its_retry_after(
    venues_on, funded, cctp, chain_a, chain_b, bob, creator, iris, fault, answered
):
    _, b = cctp
    before = b.usdc_balance(bob)
    iris.set_faults(**fault, retry_after=1, times=3)

    request = settle(create(creator, bob), [chain_a, chain_b])

    assert request.request_state == RequestState.COMPLETED
    assert b.usdc_balance(bob) == before + UNITS
    burn_tx = node(request, "burn").external_ref
    served = [s for s in iris.served() if burn_tx in s.path]
    statuses = [s.status for s in served]
    assert statuses[:3] == [answered] * 3
    assert statuses[-1] == 200
    # Each ask after a refusal came no earlier than its Retry-After (1 s), though the worker's
    # own backoff is zero here.
    for earlier, later in itertools.pairwise(served[:4]):
        assert later.at - earlier.at >= 1.0
    assert_history_replays(request)


def test_a_burn_reorged_before_attestation_is_rebroadcast_and_mints_once(
    venues_on, funded, cctp, chain_a, chain_b, bob, creator
):
    a, b = cctp
    treasury = chain_a.accounts[1].address
    before_a, before_b = a.usdc_balance(treasury), b.usdc_balance(bob)
    reorged = []

    def reorg_the_burn():
        burn = ChainTransaction.objects.filter(node__node_key="burn").first()
        if reorged or burn is None or burn.state != TxState.CONFIRMED:
            return
        depth = chain_a.block_number() - burn.block_number + 1
        chain_a.reorg(depth)  # the burn's block replaced: the burn is gone, not re-included
        reorged.append(burn.tx_hash)
        assert chain_a.web3.eth.get_transaction_count(treasury) == burn.nonce

    request = settle(create(creator, bob), [chain_a, chain_b], each=reorg_the_burn)
    assert reorged

    assert request.request_state == RequestState.COMPLETED
    burn_path = node_path(request, "burn")
    assert NodeState.UNKNOWN in burn_path
    assert burn_path[-1] == NodeState.COMPLETED
    (burn_tx,) = ChainTransaction.objects.filter(movement=request, node__node_key="burn")
    assert burn_tx.tx_hash == reorged[0]  # the same bytes again, not a new burn
    assert burn_tx.state == TxState.FINALIZED
    events = [e.evidence for e in burn_tx.events.order_by("id")]
    assert any("reorg" in e for e in events)
    assert any("rebroadcast" in e for e in events)
    assert a.usdc_balance(treasury) == before_a - UNITS  # burned once
    assert b.usdc_balance(bob) == before_b + UNITS  # minted once
    assert len(mints(b, burn_message(request, a).nonce)) == 1
    assert MovementAttention.objects.filter(request=request, reason="reorg").exists()
    reorg_events = MovementEvent.objects.filter(request=request, node_key="burn")
    assert any("reorg" in (e.detail or {}) for e in reorg_events)
    # The attestation was asked for only once the re-broadcast burn was final: nothing ran on
    # the burn that was gone.
    transitions = MovementEvent.objects.filter(request=request, kind=MovementEvent.Kind.TRANSITION)
    burn_done = transitions.get(node_key="burn", new_state=NodeState.COMPLETED)
    attestation_ready = transitions.get(node_key="attestation_observe", new_state=NodeState.READY)
    assert attestation_ready.id > burn_done.id
    assert_history_replays(request)


def test_a_mint_reorged_within_confirmations_is_rebroadcast_and_completes_by_itself(
    venues_on, funded, cctp, chain_a, chain_b, bob, creator
):
    a, b = cctp
    before = b.usdc_balance(bob)
    reorged = []

    def reorg_the_mint():
        mint = ChainTransaction.objects.filter(node__node_key="mint").first()
        if reorged or mint is None or mint.state != TxState.CONFIRMED:
            return
        chain_b.reorg(chain_b.block_number() - mint.block_number + 1)  # the mint is gone
        reorged.append(mint.tx_hash)

    request = settle(create(creator, bob), [chain_a, chain_b], each=reorg_the_mint)
    assert reorged

    # Recovered like an EVM transfer: no person needed, minted once.
    assert request.request_state == RequestState.COMPLETED
    assert NodeState.UNKNOWN not in node_path(request, "mint")
    (mint_tx,) = ChainTransaction.objects.filter(movement=request, node__node_key="mint")
    assert mint_tx.tx_hash == reorged[0] and mint_tx.state == TxState.FINALIZED
    events = [e.evidence for e in mint_tx.events.order_by("id")]
    assert any("reorg" in e for e in events) and any("rebroadcast" in e for e in events)
    assert b.usdc_balance(bob) == before + UNITS
    assert len(mints(b, burn_message(request, a).nonce)) == 1
    assert MovementAttention.objects.filter(request=request, reason="reorg").exists()
    assert_history_replays(request)


def test_a_tampered_attestation_is_refused_by_the_chain_and_the_movement_needs_a_person(
    venues_on, funded, cctp, chain_a, chain_b, bob, creator, iris
):
    a, b = cctp
    treasury = chain_a.accounts[1].address
    before_a, before_b = a.usdc_balance(treasury), b.usdc_balance(bob)
    iris.set_faults(tamper=True)

    request = settle(create(creator, bob), [chain_a, chain_b])

    assert request.request_state == RequestState.MANUAL_INTERVENTION
    assert node(request, "burn").node_state == NodeState.COMPLETED  # money left chain A
    mint = node(request, "mint")
    assert mint.node_state == NodeState.FAILED
    assert "Invalid signature: not attester" in mint.last_error
    failed = MovementEvent.objects.filter(
        request=request, node_key="mint", new_state=NodeState.FAILED
    ).get()
    assert "Invalid signature: not attester" in str(failed.detail)
    assert a.usdc_balance(treasury) == before_a - UNITS
    assert b.usdc_balance(bob) == before_b  # nothing minted
    assert not b.is_nonce_used(DOMAIN_A, burn_message(request, a).nonce)
    assert not ChainTransaction.objects.filter(movement=request, node__node_key="mint").exists()


def test_a_mint_another_relayer_landed_first_is_the_one_mint(
    venues_on, funded, cctp, chain_a, chain_b, bob, creator
):
    """receiveMessage is open to anyone: a relayer whose transaction lands first mints, ours
    reverts ("Nonce already used") and the node completes with the relayer's transaction."""
    _, b = cctp
    before = b.usdc_balance(bob)
    chain_b.set_automine(False)  # our mint waits in the mempool for the next turn's block
    front_run: list[str] = []

    def relay_first():
        ours = ChainTransaction.objects.filter(node__node_key="mint").first()
        if front_run or ours is None or ours.state not in (TxState.BROADCAST, TxState.PENDING):
            return
        attested = ours.node.request.nodes.get(node_key="attestation_observe").result
        sent = b.receive_message(
            chain_b.accounts[6],
            bytes.fromhex(attested["message"][2:]),
            bytes.fromhex(attested["attestation"][2:]),
            wait=False,
            maxPriorityFeePerGas=50 * 10**9,
            maxFeePerGas=200 * 10**9,
        )
        front_run.append(sent.to_0x_hex())

    request = settle(create(creator, bob), [chain_a, chain_b], each=relay_first)

    assert front_run
    assert request.request_state == RequestState.COMPLETED
    assert b.usdc_balance(bob) == before + UNITS  # minted once
    (minted,) = mints(b, burn_message(request, cctp[0]).nonce)
    assert minted["transactionHash"].to_0x_hex() == front_run[0]
    mint = node(request, "mint")
    assert mint.external_ref == front_run[0]
    assert mint.result["received_by"] == front_run[0]
    (ours,) = ChainTransaction.objects.filter(movement=request, node__node_key="mint")
    assert ours.state == TxState.FAILED  # mined after the relayer's, reverted, nothing minted
    assert "Nonce already used" in (mint.result.get("revert_reason") or "")
    assert node(request, "mint_observe").result["tx_hash"] == front_run[0]
    assert_history_replays(request)


@pytest.fixture
def lagging_a(chain_a):
    with LossyRpcProxy(chain_a.url) as proxy:
        yield proxy


@pytest.fixture
def rpc_a(lagging_a):
    return lagging_a.url


def test_a_burn_whose_lookups_lag_is_never_called_dropped_and_the_movement_completes(
    venues_on, funded, cctp, chain_a, chain_b, bob, creator, lagging_a
):
    _, b = cctp
    before = b.usdc_balance(bob)
    chain_a.set_automine(False)  # blocks are mined once a turn
    request = create(creator, bob)
    lagged = []

    def lag_the_burn():
        burn = ChainTransaction.objects.filter(
            movement=request, node__node_key="burn", tx_hash__gt=""
        ).first()
        if burn is not None and not lagged:
            # Mined at the end of this turn; the backend says "not found" for 10 s.
            lagging_a.lag_lookups(burn.tx_hash, seconds=10)
            lagged.append(burn.tx_hash)

    request = settle(request, [chain_a, chain_b], timeout=90, each=lag_the_burn)

    assert lagged and lagging_a.lagged
    assert request.request_state == RequestState.COMPLETED
    (burn,) = ChainTransaction.objects.filter(movement=request, node__node_key="burn")
    assert burn.tx_hash == lagged[0] and burn.state == TxState.FINALIZED
    assert not burn.events.filter(to_state=TxState.DROPPED).exists()
    assert NodeState.UNKNOWN not in node_path(request, "burn")
    attentions = MovementAttention.objects.filter(request=request)
    reasons = set(attentions.values_list("reason", flat=True))
    assert "dropped" not in reasons
    assert b.usdc_balance(bob) == before + UNITS


def test_a_burn_receipt_one_lookup_misses_after_attestation_is_not_a_reorg_and_mints_once(
    venues_on, funded, cctp, chain_a, chain_b, bob, creator, lagging_a
):
    """One receipt lookup of the burn answers null (a backend of the pool behind the others)
    once the burn is done and Iris attests it: a second look serves it, so no reorg is
    concluded, nobody is paged and the movement completes with one mint."""
    _, b = cctp
    before = b.usdc_balance(bob)
    request = create(creator, bob)
    missed = []

    def miss_the_burn_once():
        burn = node(request, "burn")
        if not missed and burn.node_state == NodeState.COMPLETED:
            lagging_a.miss_receipts(burn.external_ref, times=1)
            missed.append(burn.external_ref)

    request = settle(request, [chain_a, chain_b], each=miss_the_burn_once)

    assert missed
    assert ("eth_getTransactionReceipt", missed[0].lower()) in lagging_a.lagged
    assert request.request_state == RequestState.COMPLETED
    assert NodeState.UNKNOWN not in node_path(request, "attestation_observe")
    assert not MovementAttention.objects.filter(request=request).exists()
    assert b.usdc_balance(bob) == before + UNITS
    assert len(mints(b, burn_message(request, cctp[0]).nonce)) == 1
    assert_history_replays(request)


def test_a_burn_whose_nonce_a_foreign_transaction_took_fails_and_nothing_is_burned(
    venues_on, funded, cctp, chain_a, chain_b, bob, creator
):
    """The same rule as an EVM transfer (one recovery rule for every EVM sender): dropped at
    finality is FAILED, never an UNKNOWN left for ever with the movement EXECUTING."""
    from standins.contracts import send_transaction

    a, b = cctp
    treasury = chain_a.accounts[1]
    before_a, before_b = a.usdc_balance(treasury.address), b.usdc_balance(bob)
    chain_a.set_automine(False)  # blocks are mined once a turn
    request = create(creator, bob)
    taken = []

    def take_the_nonce():
        burn = ChainTransaction.objects.filter(
            movement=request, node__node_key="burn", tx_hash__gt=""
        ).first()
        if taken or burn is None or burn.state not in (TxState.BROADCAST, TxState.PENDING):
            return
        chain_a.drop_transaction(burn.tx_hash)
        send_transaction(
            chain_a.web3,
            treasury,
            {"to": treasury.address, "value": 0, "nonce": burn.nonce},
            wait=False,
        )
        taken.append(burn.tx_hash)

    request = settle(request, [chain_a, chain_b], timeout=90, each=take_the_nonce)

    assert taken
    assert request.request_state == RequestState.FAILED
    (burn,) = ChainTransaction.objects.filter(movement=request, node__node_key="burn")
    assert burn.state == TxState.DROPPED
    assert node_path(request, "burn")[-2:] == [NodeState.UNKNOWN, NodeState.FAILED]
    assert request.reservation.state == "RELEASED"
    assert a.usdc_balance(treasury.address) == before_a  # nothing burned
    assert b.usdc_balance(bob) == before_b


def test_a_movement_above_the_burn_limit_per_message_is_refused_at_create(
    venues_on, funded, cctp, chain_a, chain_b, bob, creator
):
    a, _ = cctp
    a.set_burn_limit(10 * 10**6)  # 10 USDC per message, as Circle's TokenMinter says

    request = movement_create(
        template="cctp",
        asset="USDC",
        amount=AMOUNT,
        source=TREASURY,
        destination=bob,
        params={"source_chain": "ethereum", "destination_chain": "arbitrum"},
        actor=Actor.for_user(creator),
    )

    assert request.request_state == RequestState.FAILED
    assert "above the per-message burn limit of 10 USDC" in request.failure_reason
    assert not request.nodes.exists()
    assert not ChainTransaction.objects.exists()  # no allowance, no burn


@pytest.mark.django_db(transaction=True)
def test_two_first_burns_at_once_send_one_allowance_approve(
    venues_on, funded, cctp, chain_a, chain_b, bob, creator
):
    import threading

    from django.db import connection, connections

    from movements.executors.base import ExecutionContext, TransientError
    from venues.cctp.executors import CctpBurn

    if connection.vendor != "postgresql":
        pytest.skip("the sender's row lock is PostgreSQL's (SQLite serialises all writers)")
    requests = [create(creator, bob, amount="1") for _ in range(2)]
    contexts = [
        ExecutionContext(
            request_id=str(request.pk),
            node_id=node(request, "burn").pk,
            node_key="burn",
            attempt=1,
            asset="USDC",
            amount=Decimal("1"),
            source=TREASURY,
            destination=bob,
            config=request.plan_nodes.get(key="burn").config,
            params=request.params,
        )
        for request in requests
    ]
    both = threading.Barrier(2)
    outcomes = []

    def first_burn(ctx):
        try:
            both.wait()
            CctpBurn().prepare(ctx)
        except TransientError:
            outcomes.append("waiting for the allowance")
        except Exception as exc:  # reported by the assertion below
            outcomes.append(repr(exc))
        finally:
            connections.close_all()

    threads = [threading.Thread(target=first_burn, args=(ctx,)) for ctx in contexts]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    assert outcomes == ["waiting for the allowance"] * 2
    approvals = ChainTransaction.objects.filter(chain="ethereum", node__isnull=True)
    assert approvals.count() == 1
    assert approvals.get().events.first().evidence["owned_by"] == "sender"


def test_a_signed_allowance_of_a_failed_movement_is_the_senders_and_is_sent_not_filled(
    venues_on, funded, cctp, chain_a, chain_b, bob, creator
):

    from movements.executors.base import ExecutionContext
    from venues.cctp.allowance import _approvals, _create_approval, settle_allowances
    from venues.cctp.config import cctp_chain
    from venues.evm.config import evm_chain
    from venues.evm.tx import Transfer, sign_stored, signer_of
    from venues.evm.tx.gaps import fill_nonce_gaps

    a, _ = cctp
    a.set_burn_limit(1)
    failed = movement_create(  # refused at create: the movement ends FAILED
        template="cctp",
        asset="USDC",
        amount=AMOUNT,
        source=TREASURY,
        destination=bob,
        params={"source_chain": "ethereum", "destination_chain": "arbitrum"},
        actor=Actor.for_user(creator),
    )
    a.set_burn_limit(2**256 - 1)
    assert failed.request_state == RequestState.FAILED
    chain, cctp_a = evm_chain("ethereum"), cctp_chain("ethereum")
    sender = chain.account(TREASURY).address
    owner = Transfer(chain, sender, TREASURY, cctp_a.token_messenger, "USDC", 0, cctp_a.usdc)
    ctx = ExecutionContext(
        str(failed.pk), 0, "burn", 1, "USDC", Decimal(AMOUNT), TREASURY, bob, {}, {}
    )
    # A worker signed the approve for that movement and died before sending it.
    approve = _create_approval(
        ctx, owner, chain_a.web3, usdc=cctp_a.usdc, spender=cctp_a.token_messenger
    )
    approve = sign_stored(approve, signer_of(owner))

    report = fill_nonce_gaps(chain, sender)

    approve.refresh_from_db()
    assert report.filled == [] and approve.state == TxState.SIGNED  # not an orphan
    settle_allowances(chain, sender, cctp_a.usdc)
    chain_a.mine()
    settle_allowances(chain, sender, cctp_a.usdc)
    approve.refresh_from_db()
    assert approve.state in (TxState.CONFIRMED, TxState.FINALIZED)
    assert a.usdc.functions.allowance(sender, cctp_a.token_messenger).call() > 0
    assert _approvals(chain, sender, cctp_a.usdc) in ([], [approve])


class WorkerKilled(BaseException):
    """The worker process dying (SIGKILL) at a crash point, in-process."""


def kill_the_worker_at(monkeypatch, point, chain):
    """The next worker that reaches ``point`` with a transaction on ``chain`` dies there
    (once); returns a list that says when it did."""
    from venues.evm.tx import broadcast

    real = broadcast.crash_point
    killed: list[str] = []

    def crash(name, on=""):
        if name == point and on == chain and not killed:
            killed.append(f"{name}@{on}")
            raise WorkerKilled(name)
        real(name, on)

    monkeypatch.setattr(broadcast, "crash_point", crash)
    return killed


def run_through_a_worker_death(request, chains, killed, *, timeout=60.0, then=None, each=None):
    """Run the sweeps until the worker dies, ``then()``, let its lease run out (the reaper
    finds the node where the dead worker left it), and settle the movement."""
    from datetime import timedelta

    from django.utils import timezone

    from movements.models import MovementRequestNode

    deadline = time.monotonic() + timeout
    while not killed:
        assert time.monotonic() < deadline, "the worker did not die"
        try:
            run_workers_once(owner="doomed-worker")
        except WorkerKilled:
            break
        for chain in chains:
            chain.mine()
    doomed = request.nodes.get(lease_owner="doomed-worker")
    assert doomed.node_state == NodeState.SUBMITTING
    if then is not None:
        then()
    MovementRequestNode.objects.filter(pk=doomed.pk).update(
        lease_expires_at=timezone.now() - timedelta(seconds=1)
    )
    return settle(request, chains, timeout=timeout, each=each)


def test_a_worker_killed_during_the_mint_submit_is_recovered_by_itself_and_mints_once(
    venues_on, funded, cctp, chain_a, chain_b, bob, creator, monkeypatch
):
    """The mint left the worker, the worker died before it recorded the send: its lease
    expires, the node is UNKNOWN beside a completed burn, and recovery finds the mint by its
    hash. Nothing is unresolved, so nobody is asked: the movement completes by itself."""
    a, b = cctp
    before = b.usdc_balance(bob)
    killed = kill_the_worker_at(monkeypatch, "after_broadcast", "arbitrum")

    request = run_through_a_worker_death(create(creator, bob), [chain_a, chain_b], killed)

    assert killed
    assert request.request_state == RequestState.COMPLETED
    mint_path = node_path(request, "mint")
    assert mint_path[mint_path.index(NodeState.SUBMITTING) + 1] == NodeState.UNKNOWN
    assert mint_path.count(NodeState.SUBMITTING) == 1  # never submitted twice
    states = request.events.filter(node__isnull=True, kind=MovementEvent.Kind.TRANSITION)
    assert RequestState.MANUAL_INTERVENTION not in states.values_list("new_state", flat=True)
    (mint_tx,) = ChainTransaction.objects.filter(movement=request, node__node_key="mint")
    assert mint_tx.state == TxState.FINALIZED
    assert b.usdc_balance(bob) == before + UNITS
    assert len(mints(b, burn_message(request, a).nonce)) == 1
    assert request.reservation.state == "CONSUMED"
    assert not MovementAttention.objects.filter(request=request).exists()
    assert_history_replays(request)


def test_a_mint_whose_send_and_lookup_answers_are_lost_is_recovered_by_itself(
    venues_on, funded, cctp, chain_a, chain_b, bob, creator, lossy_b
):
    """The send's answer is lost and so is the look-up by hash right after it: the doubt goes
    to recovery (UNKNOWN beside a completed burn), which finds the mint by its hash."""
    a, b = cctp
    before = b.usdc_balance(bob)
    lossy_b.lose_response("eth_sendRawTransaction", times=1)
    lossy_b.lose_response("eth_getTransactionReceipt", times=1)
    lossy_b.lose_response("eth_getTransactionByHash", times=1)

    request = settle(create(creator, bob), [chain_a, chain_b])

    assert request.request_state == RequestState.COMPLETED
    assert "eth_sendRawTransaction" in [method for method, _ in lossy_b.lost]
    assert NodeState.UNKNOWN in node_path(request, "mint")
    states = request.events.filter(node__isnull=True, kind=MovementEvent.Kind.TRANSITION)
    assert RequestState.MANUAL_INTERVENTION not in states.values_list("new_state", flat=True)
    assert b.usdc_balance(bob) == before + UNITS
    assert len(mints(b, burn_message(request, a).nonce)) == 1
    assert_history_replays(request)


def test_a_mint_in_doubt_that_recovery_cannot_settle_asks_a_person_and_holds_the_reservation(
    venues_on, funded, cctp, chain_a, chain_b, bob, creator, lossy_b, monkeypatch, settings
):
    """The worker dies during the mint's submit and the destination chain stops answering:
    recovery cannot tell whether the mint happened. It keeps asking (the movement EXECUTING)
    until the node has waited longer than its executor expects; then a person is asked and
    the movement is the spec's MANUAL_INTERVENTION, its reservation HELD."""
    from movements.services.attention import detect_stuck_nodes

    settings.QTG_STUCK_AFTER_SECONDS = 2
    killed = kill_the_worker_at(monkeypatch, "after_broadcast", "arbitrum")

    request = run_through_a_worker_death(
        create(creator, bob),
        [chain_a, chain_b],
        killed,
        then=lossy_b.stop,  # chain B no longer answers QTG
        each=detect_stuck_nodes,
    )

    assert request.request_state == RequestState.MANUAL_INTERVENTION
    mint = node(request, "mint")
    assert mint.node_state == NodeState.UNKNOWN
    (asked,) = MovementAttention.objects.filter(request=request, node=mint)
    assert asked.reason == "stuck"
    entered = request.events.get(node__isnull=True, new_state=RequestState.MANUAL_INTERVENTION)
    unknown_since = MovementEvent.objects.get(
        request=request, node_key="mint", new_state=NodeState.UNKNOWN
    )
    assert (entered.created_at - unknown_since.created_at).total_seconds() >= 2
    assert request.reservation.state == "HELD"
    assert_history_replays(request)


def test_the_console_reads_the_burn_the_mint_and_the_allowance_of_a_real_transfer(
    venues_on, funded, cctp, chain_a, chain_b, bob, creator, client
):
    """Issue 31: each chain transaction of a real V1 transfer shows its decoded call, amount
    and recipient, its fee in ETH and gwei, its depth against the chain's finality policy, an
    explorer link from the reviewed config and its times in the console's one format."""
    a, _ = cctp
    request = settle(create(creator, bob), [chain_a, chain_b])
    assert request.request_state == RequestState.COMPLETED
    allowance, burn, mint = ChainTransaction.objects.filter(movement=request).order_by("id")

    text, html = chain_transaction_page(client, burn)
    assert f"CCTP V1 burn of 25.500001 USDC for {bob} on domain 3 (arbitrum)" in text
    assert "amount 25.500001 USDC" in text and f"recipient {bob}" in text
    assert "destination domain domain 3 (arbitrum)" in text
    assert f'href="https://etherscan.io/tx/{burn.tx_hash}"' in html
    assert fee_text(burn.fee_paid) in text
    assert f"{burn.confirmations} of 3 required (policy tag+depth: the finalized block" in text
    assert "max fee per gas" in text and " gwei" in text
    assert ONE_FORMAT.search(text) and not re.search(r"\b[ap]\.m\.", text)

    text, html = chain_transaction_page(client, mint)
    assert f"CCTP V1 mint of 25.500001 USDC to {bob} from domain 0 (ethereum)" in text
    assert f'href="https://arbiscan.io/tx/{mint.tx_hash}"' in html
    assert fee_text(mint.fee_paid) in text

    text, _ = chain_transaction_page(client, allowance)
    assert f"ERC-20 approval of {a.messenger.address} for unlimited USDC" in text

"""The ``cctp`` template on the real path: burn on devchain A, attestation from the Iris
stand-in, mint on devchain B, through the real worker services (in-process sweeps) with
QTG_VENUES choosing the venues' executors."""

import itertools
import time

import pytest
from web3.logs import DISCARD

from movements.models import MovementAttention, MovementEvent
from movements.services import intervention_resume, movement_approve, movement_create
from movements.states import TERMINAL_REQUEST_STATES, NodeState, RequestState
from qtg.core.actors import Actor
from qtg.core.venues import provide_venues
from standins.cctp import Message
from standins.rpc_proxy import LossyRpcProxy
from tests.execution.conftest import assert_history_replays, node_path, run_workers_once
from tests.movements.drive import node
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


def recovered_then_resumed(request, chains, node_key, operator):
    """An ambiguity stops the movement for a person (MANUAL_INTERVENTION) while recovery
    settles the node by itself; then an operator resumes and the movement runs to its end."""
    assert request.request_state == RequestState.MANUAL_INTERVENTION
    run_until(
        lambda: node(request, node_key).node_state == NodeState.COMPLETED,
        chains,
        what=f"{node_key} recovered",
    )
    intervention_resume(
        request=request, actor=Actor.for_user(operator), reason="recovery found it on chain"
    )
    return settle(request, chains)


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


def test_a_lost_mint_response_is_recovered_and_mints_once(
    venues_on, funded, cctp, chain_a, chain_b, bob, creator, operator, lossy_b
):
    _, b = cctp
    before = b.usdc_balance(bob)
    # The mint reaches chain B; its answer does not reach the worker.
    lossy_b.lose_response("eth_sendRawTransaction", times=1)

    request = settle(create(creator, bob), [chain_a, chain_b])
    assert NodeState.UNKNOWN in node_path(request, "mint")
    request = recovered_then_resumed(request, [chain_a, chain_b], "mint", operator)

    assert request.request_state == RequestState.COMPLETED
    assert [method for method, _ in lossy_b.lost] == ["eth_sendRawTransaction"]
    assert NodeState.UNKNOWN in node_path(request, "mint")
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

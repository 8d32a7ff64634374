"""The ``cctp_v2`` and ``cctp_v2_fast`` templates on the real path: CCTP V2 burn on devchain A
(TokenMessengerV2 with maxFee and minFinalityThreshold), attestation from the Iris stand-in's v2
endpoints (fee charged, nonce assigned off-chain), mint of amount - fee on devchain B through
MessageTransmitterV2, through the real worker services (in-process sweeps) with QTG_VENUES
choosing the venues' executors."""

import multiprocessing
import time
from decimal import Decimal

import httpx
import pytest
import yaml
from eth_utils import keccak
from prometheus_client import REGISTRY
from web3.logs import DISCARD

from movements.models import MovementAttention, MovementEvent, MovementRequest
from movements.services import movement_approve, movement_create
from movements.states import RequestState
from qtg.core.actors import Actor
from qtg.core.venues import provide_venues
from standins.cctp_v2 import MessageV2, deploy_cctp_v2, link_v2
from standins.iris import IrisService, SourceDomain
from standins.iris_v2 import FeeSchedule, RateLimit
from standins.rpc_proxy import LossyRpcProxy
from tests.execution.conftest import assert_history_replays
from tests.movements.drive import node
from tests.venues.pages import chain_transaction_page
from venues.models import ChainTransaction, TxState

from .conftest import (
    ATTESTER_KEY,
    DOMAIN_A,
    DOMAIN_B,
    IRIS_CONFIRMATIONS,
    RPC_A_ENV,
    TREASURY,
    VAULT,
)
from .test_cctp_movements import settle, supply

pytestmark = [pytest.mark.devchain, pytest.mark.standin, pytest.mark.django_db]

AMOUNT = "25.500001"
UNITS = 25_500_001
FAST_BPS = Decimal("1")  # 1 bp: 2551 units on 25.500001 USDC (rounded up)
STANDARD_BPS = Decimal("0.5")
FAST_FEE = 2551
STANDARD_FEE = 1276


@pytest.fixture(scope="session")
def cctp_v2(chain_a, chain_b, cctp):
    """CCTP V2 beside V1 on both chains (the same USDC; fees to dev account 5), linked."""
    a, b = cctp
    attester = cctp_attester_address()
    a2 = deploy_cctp_v2(
        chain_a.web3,
        chain_a.accounts[0],
        domain=DOMAIN_A,
        attester=attester,
        usdc=a.usdc,
        fee_recipient=chain_a.accounts[5].address,
    )
    b2 = deploy_cctp_v2(
        chain_b.web3,
        chain_b.accounts[0],
        domain=DOMAIN_B,
        attester=attester,
        usdc=b.usdc,
        fee_recipient=chain_b.accounts[5].address,
    )
    link_v2(a2, b2)
    return a2, b2


def cctp_attester_address():
    from eth_account import Account

    return Account.from_key(ATTESTER_KEY).address


@pytest.fixture(scope="session")
def iris_v2_service(chain_a, chain_b, cctp, cctp_v2):
    (a, b), (a2, b2) = cctp, cctp_v2
    domains = {
        DOMAIN_A: SourceDomain(chain_a.url, a.transmitter.address, a2.transmitter.address),
        DOMAIN_B: SourceDomain(chain_b.url, b.transmitter.address, b2.transmitter.address),
    }
    fees = FeeSchedule(fast_bps=FAST_BPS, standard_bps=STANDARD_BPS)
    with IrisService(
        domains,
        attester_key=ATTESTER_KEY,
        confirmations=IRIS_CONFIRMATIONS,
        fees=fees,
        rate_limit=RateLimit(),
    ) as iris:
        yield iris


@pytest.fixture
def iris(iris_v2_service):
    """The Iris stand-in with V2 (overrides the V1-only one for chains_config)."""
    iris_v2_service.reset()
    yield iris_v2_service
    iris_v2_service.reset()


@pytest.fixture
def v2_config(chains_config, cctp_v2, tmp_path, settings):
    a2, b2 = cctp_v2
    config = yaml.safe_load(yaml.safe_dump(chains_config))
    for name, domain in (("ethereum", a2), ("arbitrum", b2)):
        config["chains"][name]["cctp"] |= {
            "token_messenger_v2": domain.messenger.address,
            "message_transmitter_v2": domain.transmitter.address,
        }
    path = tmp_path / "chains_v2.yaml"
    path.write_text(yaml.safe_dump(config))
    settings.QTG_CHAINS_CONFIG = str(path)
    return config


@pytest.fixture
def venues_on(settings, v2_config):
    settings.QTG_VENUES = "local"
    settings.QTG_EXECUTOR_DEFAULT_PROVIDER = "venues"
    settings.QTG_OBSERVE_POLL_SECONDS = 0
    settings.QTG_RETRY_BASE_SECONDS = 0
    settings.QTG_RETRY_MAX_SECONDS = 0
    provide_venues([TREASURY, VAULT])


@pytest.fixture
def funded(cctp, chain_a):
    a, _ = cctp
    a.mint_usdc(chain_a.accounts[1].address, 100 * 10**6)


@pytest.fixture
def bob(chain_b):
    return chain_b.accounts[2].address


def v2_params(max_fee, hook_data=None) -> dict:
    params = {"source_chain": "ethereum", "destination_chain": "arbitrum", "max_fee": max_fee}
    if hook_data is not None:
        params["hook_data"] = hook_data
    return params


def create(creator, destination, *, template, max_fee, amount=AMOUNT, approve=True, hook_data=None):
    request = movement_create(
        template=template,
        asset="USDC",
        amount=amount,
        source=TREASURY,
        destination=destination,
        params=v2_params(max_fee, hook_data),
        actor=Actor.for_user(creator),
    )
    if approve and request.request_state != RequestState.FAILED:
        movement_approve(request=request, actor=Actor.system("tests-approver"))
    return request


def v2_mints(b2, nonce):
    logs = b2.transmitter.events.MessageReceived().get_logs(from_block=0)
    return [log for log in logs if bytes(log["args"]["nonce"]) == nonce]


def attested(request):
    return MessageV2.parse(
        bytes.fromhex(node(request, "attestation_observe").result["message"][2:])
    )


def emitted(request, a2):
    receipt = a2.w3.eth.get_transaction_receipt(node(request, "burn").external_ref)
    (event,) = a2.transmitter.events.MessageSent().process_receipt(receipt, errors=DISCARD)
    return MessageV2.parse(bytes(event["args"]["message"]))


@pytest.fixture
def lagging_a(chain_a, venues_on, monkeypatch):
    """The stand-in proxy in front of chain A, the product reading chain A through it."""
    with LossyRpcProxy(chain_a.url) as proxy:
        monkeypatch.setenv(RPC_A_ENV, proxy.url)
        yield proxy


@pytest.mark.parametrize("template", ["cctp_v2", "cctp_v2_fast"])
def test_a_v2_burn_receipt_one_lookup_misses_is_not_a_reorg_and_mints_once(
    venues_on, lagging_a, funded, cctp_v2, chain_a, chain_b, bob, creator, template
):
    """Once the burn is done, one receipt lookup of it answers null (a backend behind the
    others): a second look serves it, nobody is paged and the movement mints once."""
    _, b2 = cctp_v2
    request = create(creator, bob, template=template, max_fee="0.01")
    missed = []

    def miss_the_burn_once():
        burn = node(request, "burn")
        if not missed and burn.node_state == "COMPLETED":
            lagging_a.miss_receipts(burn.external_ref, times=1)
            missed.append(burn.external_ref)

    request = settle(request, [chain_a, chain_b], each=miss_the_burn_once)

    assert missed
    assert ("eth_getTransactionReceipt", missed[0].lower()) in lagging_a.lagged
    assert request.request_state == RequestState.COMPLETED, request.failure_reason
    assert not MovementAttention.objects.filter(request=request).exists()
    assert len(v2_mints(b2, attested(request).nonce)) == 1
    assert_history_replays(request)


@pytest.mark.parametrize(
    ("template", "max_fee", "fee", "threshold"),
    [
        ("cctp_v2", "0.01", STANDARD_FEE, 2000),
        ("cctp_v2_fast", "0.01", FAST_FEE, 1000),
    ],
)
def test_a_v2_transfer_moves_amount_out_and_amount_minus_fee_in(
    venues_on,
    funded,
    cctp,
    cctp_v2,
    chain_a,
    chain_b,
    bob,
    creator,
    template,
    max_fee,
    fee,
    threshold,
):
    (a, b), (a2, b2) = cctp, cctp_v2
    treasury = chain_a.accounts[1].address
    fee_recipient = chain_b.accounts[5].address
    before = (
        a.usdc_balance(treasury),
        supply(a),
        b.usdc_balance(bob),
        b.usdc_balance(fee_recipient),
        supply(b),
    )

    labels = {"version": "2", "threshold": str(threshold)}
    latencies = REGISTRY.get_sample_value("qtg_cctp_attestation_seconds_count", labels) or 0

    request = create(creator, bob, template=template, max_fee=max_fee)
    request = settle(request, [chain_a, chain_b])

    assert request.request_state == RequestState.COMPLETED, request.failure_reason
    assert a.usdc_balance(treasury) == before[0] - UNITS  # source - amount
    assert supply(a) == before[1] - UNITS  # burned
    assert b.usdc_balance(bob) == before[2] + UNITS - fee  # destination + amount - fee
    assert b.usdc_balance(fee_recipient) == before[3] + fee
    assert supply(b) == before[4] + UNITS
    # The attested message is the emitted one with the attester's fields filled in.
    sent, signed = emitted(request, a2), attested(request)
    assert sent.nonce == b"\0" * 32 and signed.nonce != b"\0" * 32
    assert signed.min_finality_threshold == threshold
    assert signed.finality_threshold_executed == threshold
    assert signed.burn.fee_executed == fee
    assert signed.burn.max_fee == 10_000
    assert len(v2_mints(b2, signed.nonce)) == 1
    assert b2.is_nonce_used(signed.nonce)
    # What the movement shows: amount, fee, amount received.
    burn_result = node(request, "burn").result
    assert burn_result["fee_quoted"] == str(Decimal(fee) / 10**6)
    observed = node(request, "attestation_observe").result
    assert observed["fee_executed"] == str(Decimal(fee) / 10**6)
    assert observed["amount_received"] == str(Decimal(UNITS - fee) / 10**6)
    txs = ChainTransaction.objects.filter(movement=request).order_by("id")
    assert [tx.state for tx in txs] == [TxState.FINALIZED] * len(txs)
    # The attestation latency was measured once (burn block to accepted attestation).
    assert REGISTRY.get_sample_value("qtg_cctp_attestation_seconds_count", labels) == latencies + 1
    # The reservation (and every hardcap's sum) counts what left the source: the whole amount,
    # the fee included, consumed once the money left.
    reservation = request.reservation
    assert reservation.amount == Decimal(AMOUNT)
    assert reservation.state == "CONSUMED"
    assert_history_replays(request)


def test_a_fee_above_max_fee_is_refused_at_create(
    venues_on, funded, cctp_v2, chain_a, chain_b, bob, creator
):
    request = create(creator, bob, template="cctp_v2_fast", max_fee="0.002", approve=False)

    assert request.request_state == RequestState.FAILED
    assert "above its maxFee of 0.002 USDC" in request.failure_reason
    assert "0.002551 USDC" in request.failure_reason
    assert not request.nodes.exists()
    assert not ChainTransaction.objects.exists()  # nothing signed, nothing burned


def test_a_fast_burn_reorged_before_finality_is_held_and_minted_once(
    venues_on, funded, cctp, cctp_v2, chain_a, chain_b, bob, creator
):
    (a, b), (_, b2) = cctp, cctp_v2
    treasury = chain_a.accounts[1].address
    before_a, before_b = a.usdc_balance(treasury), b.usdc_balance(bob)
    reorged = []

    def reorg_the_burn():
        burn = ChainTransaction.objects.filter(node__node_key="burn").first()
        if reorged or burn is None or burn.state != TxState.CONFIRMED:
            return
        burn_node = node(request, "burn")
        if burn_node.node_state != "COMPLETED":
            return
        assert chain_a.block_number("finalized") < burn.block_number  # not final yet
        depth = chain_a.block_number() - burn.block_number + 1
        chain_a.reorg(depth)  # the burn's block replaced: the burn is gone
        reorged.append(burn.tx_hash)

    request = create(creator, bob, template="cctp_v2_fast", max_fee="0.01")
    request = settle(request, [chain_a, chain_b], each=reorg_the_burn, timeout=90)
    assert reorged
    # The attestation was held while the burn was gone, and the burn's own bytes went again.
    held = MovementEvent.objects.filter(request=request, node_key="attestation_observe")
    assert any("held" in (e.detail or {}) for e in held)
    assert node(request, "burn").result.get("completed_at") == "safe"  # fast: before finality

    assert request.request_state == RequestState.COMPLETED, request.failure_reason
    (burn_tx,) = ChainTransaction.objects.filter(movement=request, node__node_key="burn")
    assert burn_tx.tx_hash == reorged[0]  # the same bytes again, not a second burn
    assert burn_tx.state == TxState.FINALIZED
    assert a.usdc_balance(treasury) == before_a - UNITS  # burned once
    assert b.usdc_balance(bob) == before_b + UNITS - FAST_FEE  # minted once
    assert len(v2_mints(b2, attested(request).nonce)) == 1
    all_mints = b2.transmitter.events.MessageReceived().get_logs(from_block=0)
    assert len([m for m in all_mints if m["args"]["sourceDomain"] == DOMAIN_A]) >= 1
    assert node(request, "burn_final").node_state == "COMPLETED"
    evidence = [e.evidence for e in burn_tx.events.order_by("id")]
    assert any("reorg" in e for e in evidence)
    assert any("rebroadcast" in e for e in evidence)
    assert_history_replays(request)


def _poll_iris_until(deadline: float, results) -> None:
    """One worker process: ask Iris through the product's client, as fast as the shared
    bucket lets it, until ``deadline``; report how many answers and the first error."""
    from django.db import connections

    from venues.cctp.config import iris_url
    from venues.cctp.iris import IrisClient

    answered, error = 0, ""
    try:
        with IrisClient(iris_url(), shared_bucket=True) as client:
            while time.time() < deadline:
                client.fee_bps(DOMAIN_A, DOMAIN_B)
                answered += 1
    except Exception as exc:  # a TransientError here is a 429 or a block
        error = f"{type(exc).__name__}: {exc}"
    finally:
        connections.close_all()
        results.put((answered, error))


@pytest.mark.django_db(transaction=True)
def test_three_workers_polling_at_once_stay_under_the_iris_rate_limit(
    venues_on, iris, cctp_v2, chain_a
):
    """Three worker processes (each its own database connection) ask Iris as fast as they can
    for three seconds: the bucket they share in the database keeps every second under Circle's
    35 requests, so Iris never answers 429 (which would block everyone for 5 minutes)."""
    from django.db import connections

    connections.close_all()  # each forked worker opens its own
    context = multiprocessing.get_context("fork")
    results = context.Queue()
    deadline = time.time() + 3.0
    workers = [context.Process(target=_poll_iris_until, args=(deadline, results)) for _ in range(3)]
    for worker in workers:
        worker.start()
    reported = [results.get(timeout=30) for _ in workers]
    for worker in workers:
        worker.join(10)

    assert [error for _, error in reported if error] == []
    assert all(answered > 0 for answered, _ in reported)  # all three polled
    served = [s for s in iris.served() if s.path.startswith("/v2/burn")]
    assert not [s for s in served if s.status == 429]
    assert len(served) >= 50  # they did poll hard: more than one second's worth
    times = sorted(s.at for s in served)
    busiest = max(sum(1 for t in times if start <= t < start + 1.0) for start in times)
    assert busiest <= 35


def test_a_429_blocks_every_worker_for_the_block_period(venues_on, iris, cctp_v2):
    from movements.executors.base import TransientError
    from venues.cctp.config import iris_url
    from venues.cctp.iris import IrisClient

    iris.set_faults(rate_limit=True, times=1)  # Iris says 429, without a Retry-After
    with (
        IrisClient(iris_url(), shared_bucket=True) as first,
        pytest.raises(TransientError) as raised,
    ):
        first.messages(DOMAIN_A, "0x" + "ab" * 32)
    assert raised.value.retry_after == 300  # Circle's 5-minute block
    asked = len(iris.served())
    with (
        IrisClient(iris_url(), shared_bucket=True) as second,
        pytest.raises(TransientError) as raised,
    ):
        second.fee_bps(DOMAIN_A, DOMAIN_B)
    assert raised.value.retry_after > 290
    assert len(iris.served()) == asked  # nobody asked Iris during the block


def test_a_v2_mint_another_relayer_landed_first_is_the_one_mint(
    venues_on, funded, cctp, cctp_v2, chain_a, chain_b, bob, creator
):
    """receiveMessage (V2) is open to anyone: a relayer whose transaction lands first mints;
    ours reverts ("Nonce already used") and the node completes with the relayer's transaction,
    found through ``usedNonces`` of the attested message's nonce (not a nonce read at burn)."""
    (_, b), (_, b2) = cctp, cctp_v2
    before = b.usdc_balance(bob)
    chain_b.set_automine(False)  # our mint waits in the mempool for the next turn's block
    front_run: list[str] = []

    def relay_first():
        ours = ChainTransaction.objects.filter(node__node_key="mint").first()
        if front_run or ours is None or ours.state not in (TxState.BROADCAST, TxState.PENDING):
            return
        result = ours.node.request.nodes.get(node_key="attestation_observe").result
        sent = b2.receive_message(
            chain_b.accounts[6],
            bytes.fromhex(result["message"][2:]),
            bytes.fromhex(result["attestation"][2:]),
            wait=False,
            maxPriorityFeePerGas=50 * 10**9,
            maxFeePerGas=200 * 10**9,
        )
        front_run.append(sent.to_0x_hex())

    request = create(creator, bob, template="cctp_v2", max_fee="0.01")
    request = settle(request, [chain_a, chain_b], each=relay_first)

    assert front_run
    assert request.request_state == RequestState.COMPLETED, request.failure_reason
    assert b.usdc_balance(bob) == before + UNITS - STANDARD_FEE  # minted once
    (minted,) = v2_mints(b2, attested(request).nonce)
    assert minted["transactionHash"].to_0x_hex() == front_run[0]
    mint = node(request, "mint")
    assert mint.external_ref == front_run[0]
    assert mint.result["received_by"] == front_run[0]
    (ours,) = ChainTransaction.objects.filter(movement=request, node__node_key="mint")
    assert ours.state == TxState.FAILED  # mined after the relayer's, reverted
    assert "Nonce already used" in (mint.result.get("revert_reason") or "")
    assert_history_replays(request)


def test_a_v2_movement_above_the_burn_limit_per_message_is_refused_at_create(
    venues_on, funded, cctp_v2, chain_a, chain_b, bob, creator
):
    a2, _ = cctp_v2
    a2.set_burn_limit(10 * 10**6)  # 10 USDC per message, read from TokenMessengerV2's minter
    try:
        request = create(creator, bob, template="cctp_v2", max_fee="0.01", approve=False)
    finally:
        a2.set_burn_limit(2**256 - 1)

    assert request.request_state == RequestState.FAILED
    assert "above the per-message burn limit of 10 USDC" in request.failure_reason
    assert not request.nodes.exists()
    assert not ChainTransaction.objects.exists()


def test_a_fast_burn_attested_then_reorged_is_held_and_minted_once(
    venues_on, iris, funded, cctp, cctp_v2, chain_a, chain_b, bob, creator
):
    """Iris has signed the fast message (at `safe`) when a reorg removes the burn before the
    source finalizes, and keeps serving that attestation: QTG does not mint on a burn that is
    gone; the burn's own bytes go again, the re-included burn carries the same attested
    message, and it is minted once."""
    (a, b), (_, b2) = cctp, cctp_v2
    treasury = chain_a.accounts[1].address
    before_a, before_b = a.usdc_balance(treasury), b.usdc_balance(bob)
    reorged, served_after = [], []

    def attest_then_reorg():
        if reorged or node(request, "burn").node_state != "COMPLETED":
            return
        burn = ChainTransaction.objects.get(node__node_key="burn")
        url = f"{iris.url}/v2/messages/{DOMAIN_A}"
        params = {"transactionHash": burn.tx_hash}
        (entry,) = httpx.get(url, params=params, timeout=10).json()["messages"]
        assert entry["status"] == "complete"  # signed at `safe`, before finality
        assert chain_a.block_number("finalized") < burn.block_number
        chain_a.reorg(chain_a.block_number() - burn.block_number + 1)
        reorged.append(burn.tx_hash)
        (entry,) = httpx.get(url, params=params, timeout=10).json()["messages"]
        served_after.append(entry["status"])

    request = create(creator, bob, template="cctp_v2_fast", max_fee="0.01")
    request = settle(request, [chain_a, chain_b], each=attest_then_reorg, timeout=90)
    assert reorged
    assert served_after == ["complete"]  # the attestation outlived the burn

    assert request.request_state == RequestState.COMPLETED, request.failure_reason
    (burn_tx,) = ChainTransaction.objects.filter(movement=request, node__node_key="burn")
    assert burn_tx.tx_hash == reorged[0] and burn_tx.state == TxState.FINALIZED
    assert a.usdc_balance(treasury) == before_a - UNITS  # burned once
    assert b.usdc_balance(bob) == before_b + UNITS - FAST_FEE  # minted once
    assert len(v2_mints(b2, attested(request).nonce)) == 1
    held = MovementEvent.objects.filter(request=request, node_key="attestation_observe")
    assert any("held" in (e.detail or {}) for e in held)
    assert_history_replays(request)


def test_the_console_reads_a_v2_fast_burn_and_its_mint(
    venues_on, funded, cctp, cctp_v2, chain_a, chain_b, bob, creator, client
):
    """Issue 31: a V2 burn shows its amount, recipient, destination domain, max fee and
    finality threshold; its mint the attested message's amount and recipient."""
    a2, _ = cctp_v2
    request = settle(
        create(creator, bob, template="cctp_v2_fast", max_fee="0.01"), [chain_a, chain_b]
    )
    assert request.request_state == RequestState.COMPLETED, request.failure_reason
    txs = list(ChainTransaction.objects.filter(movement=request).order_by("id"))
    burn = next(tx for tx in txs if tx.node and tx.node.node_key == "burn")
    mint = next(tx for tx in txs if tx.node and tx.node.node_key == "mint")

    text, html = chain_transaction_page(client, burn)
    assert f"CCTP V2 burn of 25.500001 USDC for {bob} on domain 3 (arbitrum)" in text
    assert "max fee 0.01 USDC" in text and "finality threshold 1000 (fast)" in text
    assert f"contract {a2.messenger.address}" in text
    assert f'href="https://etherscan.io/tx/{burn.tx_hash}"' in html

    text, _ = chain_transaction_page(client, mint)
    assert f"CCTP V2 mint of 25.500001 USDC to {bob} from domain 0 (ethereum)" in text


HOOK = keccak(text="qtg hook") + b"swap to EURC; then deposit to vault 7"
DEPOSIT_FOR_BURN_WITH_HOOK = keccak(
    text="depositForBurnWithHook(uint256,uint32,bytes32,address,bytes32,uint256,uint32,bytes)"
)[:4]


def test_a_v2_transfer_with_hook_data_carries_it_byte_for_byte_to_the_mint(
    venues_on, funded, cctp, cctp_v2, chain_a, chain_b, bob, creator
):
    """``hook_data`` goes out through depositForBurnWithHook, sits at the end of the burn
    message (byte 228 of its body), is attested and received exactly as sent."""
    (a, b), (a2, b2) = cctp, cctp_v2
    treasury = chain_a.accounts[1].address
    before_a, before_b = a.usdc_balance(treasury), b.usdc_balance(bob)

    request = create(
        creator, bob, template="cctp_v2_fast", max_fee="0.01", hook_data="0x" + HOOK.hex()
    )
    request = settle(request, [chain_a, chain_b])

    assert request.request_state == RequestState.COMPLETED, request.failure_reason
    burn_hash = node(request, "burn").external_ref
    sent = a2.w3.eth.get_transaction(burn_hash)
    assert bytes(sent["input"])[:4] == DEPOSIT_FOR_BURN_WITH_HOOK
    receipt = a2.w3.eth.get_transaction_receipt(burn_hash)
    (deposit,) = a2.messenger.events.DepositForBurn().process_receipt(receipt, errors=DISCARD)
    assert bytes(deposit["args"]["hookData"]) == HOOK
    assert emitted(request, a2).body[228:] == HOOK  # where Circle's BurnMessageV2 carries it
    signed = attested(request)
    assert signed.burn.hook_data == HOOK
    (received,) = v2_mints(b2, signed.nonce)
    assert bytes(received["args"]["messageBody"]) == signed.body  # the mint got it unchanged
    assert bytes(received["args"]["messageBody"])[228:] == HOOK
    assert a.usdc_balance(treasury) == before_a - UNITS
    assert b.usdc_balance(bob) == before_b + UNITS - FAST_FEE
    assert_history_replays(request)


def test_a_v2_transfer_without_hook_data_burns_with_plain_deposit_for_burn(
    venues_on, funded, cctp_v2, chain_a, chain_b, bob, creator
):
    request = create(creator, bob, template="cctp_v2", max_fee="0.01")
    request = settle(request, [chain_a, chain_b])

    assert request.request_state == RequestState.COMPLETED, request.failure_reason
    sent = chain_a.web3.eth.get_transaction(node(request, "burn").external_ref)
    assert bytes(sent["input"])[:4] != DEPOSIT_FOR_BURN_WITH_HOOK
    assert attested(request).burn.hook_data == b""


@pytest.mark.parametrize(
    ("hook_data", "why"),
    [
        ("abcd", "no 0x"),
        ("0xabc", "odd number of hex digits"),
        ("0xzz", "not hex"),
        ("0x", "no byte: leave it out for a burn without a hook"),
        ("0x" + "00" * 1025, "above the 1024 bytes carried"),
    ],
)
def test_bad_hook_data_is_a_400_naming_it_and_writes_nothing(
    venues_on, funded, cctp_v2, bob, creator, hook_data, why
):
    from tests.api.conftest import assert_error, client_for, post_create

    body = {
        "template": "cctp_v2_fast",
        "asset": "USDC",
        "amount": AMOUNT,
        "source": TREASURY,
        "destination": bob,
        "params": v2_params("0.01", hook_data),
    }
    response = post_create(client_for(creator), body)

    problem = assert_error(response, 400, "invalid")
    assert "hook_data" in problem["details"]["params"], why
    assert not MovementRequest.objects.exists()
    assert not ChainTransaction.objects.exists()

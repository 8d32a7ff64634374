"""An anvil devchain for the EVM tests, two test tokens (6 and 18 decimals), a chains config
naming it, and a loop that runs the real worker services in-process while blocks are mined.

Each test gets the chain back as it found it (snapshot/revert, mempool emptied, automine on)."""

import time
from pathlib import Path

import pytest
import yaml

from movements.models import MovementEvent, MovementRequest
from movements.services import movement_approve, movement_create
from movements.states import TERMINAL_REQUEST_STATES
from qtg.core.actors import Actor
from qtg.core.venues import provide_venues
from reservations.services import hardcap_ensure
from standins.anvil import KEEP_EVERY_STATE, Anvil
from standins.contracts import deploy_test_token, transact
from tests.execution.conftest import run_workers_once
from venues.signing import forget_signers

CHAIN = "devchain"
CHAIN_ID = 31337
RPC_ENV = "QTG_TEST_DEVCHAIN_RPC_URL"
KEY_ENV = "QTG_TEST_TREASURY_KEY"
TREASURY = "treasury"
TOKEN_SUPPLY = 10**6  # whole tokens minted to the treasury


@pytest.fixture(scope="session")
def devchain():
    with Anvil(chain_id=CHAIN_ID, finalized_lag=2, extra_args=KEEP_EVERY_STATE) as chain:
        yield chain


@pytest.fixture(scope="session")
def tokens(devchain):
    """USDC (6 decimals) and DAI (18 decimals), minted to the treasury (dev account 1)."""
    owner, treasury = devchain.accounts[0], devchain.accounts[1]
    found = {}
    for symbol, decimals in (("USDC", 6), ("DAI", 18)):
        token = deploy_test_token(devchain.web3, owner, decimals=decimals, symbol=symbol)
        transact(
            devchain.web3,
            owner,
            token.functions.mint(treasury.address, TOKEN_SUPPLY * 10**decimals),
        )
        found[symbol] = token
    return found


@pytest.fixture(autouse=True)
def _rewind_devchain(request):
    if "devchain" not in request.fixturenames:
        yield
        return
    chain = request.getfixturevalue("devchain")
    snapshot = chain.snapshot()
    base_fee = chain.web3.eth.get_block("latest")["baseFeePerGas"]
    yield
    chain.drop_all_transactions()
    # Interval mining off first: anvil's evm_setIntervalMining(0) also switches automine off.
    chain.set_interval_mining(0)
    chain.set_automine(True)
    assert chain.revert(snapshot), "snapshot could not be reverted"
    # anvil keeps a base fee set for the next block across a revert.
    chain.set_next_block_base_fee(base_fee)


@pytest.fixture
def lossy(devchain):
    """``standins.rpc_proxy`` in front of the devchain (the product is not pointed at it)."""
    from standins.rpc_proxy import LossyRpcProxy

    with LossyRpcProxy(devchain.url) as proxy:
        yield proxy


@pytest.fixture
def recipient(devchain):
    """Where the tests send: a dev account that holds no tokens."""
    return devchain.accounts[5].address


@pytest.fixture
def chain_config(devchain, tokens, tmp_path, settings, monkeypatch):
    """Write the chains config for the devchain (``overrides`` change the chain entry) and
    point QTG at it; returns the writer, already called once with the defaults."""

    def write(**overrides):
        entry = {
            "kind": "evm",
            "chain_id": CHAIN_ID,
            "rpc_url_env": RPC_ENV,
            "confirmations": 3,
            "block_seconds": 1,
            "replace_after_seconds": 600,
            "max_fee_gwei": 100,
            "broadcast_window_seconds": 5,
            "rpc_timeout_seconds": 5,
            "tokens": {
                symbol: {"address": token.address, "decimals": token.functions.decimals().call()}
                for symbol, token in tokens.items()
            },
            "accounts": {
                TREASURY: {"address": devchain.accounts[1].address, "key": {"env": KEY_ENV}}
            },
            **overrides,
        }
        path = tmp_path / f"chains-{time.monotonic_ns()}.yaml"
        path.write_text(yaml.safe_dump({"version": 1, "chains": {CHAIN: entry}}))
        settings.QTG_CHAINS_CONFIG = str(path)
        return path

    monkeypatch.setenv(RPC_ENV, devchain.url)
    monkeypatch.setenv(KEY_ENV, devchain.accounts[1].signer.key.hex())
    provide_venues([TREASURY])
    forget_signers()
    write()
    yield write
    forget_signers()


@pytest.fixture
def fast_worker(settings):
    settings.QTG_OBSERVE_POLL_SECONDS = 0
    settings.QTG_RETRY_BASE_SECONDS = 0
    settings.QTG_RETRY_MAX_SECONDS = 0
    hardcap_ensure(asset="DAI", max_in_flight="1000000000000", note="evm tests")


def transfer(creator, recipient, *, asset="USDC", amount="12.345678", approve=True, **params):
    request = movement_create(
        template="evm_transfer",
        asset=asset,
        amount=amount,
        source=TREASURY,
        destination=recipient,
        params={"chain": CHAIN, **params},
        actor=Actor.for_user(creator),
    )
    if approve:
        movement_approve(request=request, actor=Actor.system("tests-approver"))
    return request


def settle(request, chain, *, mine=1, timeout=30.0, until=None, each=None):
    """Run the worker services in-process (one pass each turn), mining ``mine`` blocks per
    turn, until the movement reaches a state in ``until`` (terminal or waiting for a
    person by default). ``each()`` runs every turn (a test's own step)."""
    targets = set(until or (*TERMINAL_REQUEST_STATES, "MANUAL_INTERVENTION"))
    deadline = time.monotonic() + timeout
    while True:
        request.refresh_from_db()
        if request.request_state in targets:
            return request
        if time.monotonic() > deadline:
            states = dict(request.nodes.values_list("node_key", "node_state"))
            raise AssertionError(f"movement stuck in {request.request_state}: {states}")
        run_workers_once()
        if each is not None:
            each()
        if mine:
            chain.mine(mine)
        time.sleep(0.01)


def balance(chain, token, address) -> int:
    return token.functions.balanceOf(address).call()


def node_events(request: MovementRequest, key: str) -> list[MovementEvent]:
    return list(MovementEvent.objects.filter(request=request, node_key=key).order_by("id"))


REPO = Path(__file__).resolve().parents[3]

"""Two anvil devchains for the whole session, our contracts compiled once, and per-test rewind.

Chains A and B have different chain ids (and CCTP domains). Every test that uses a chain gets it
back as it found it: the chain state is snapshotted before and reverted after the test, the
mempool emptied and automine switched back on, so tests can reorg, drop and stop mining freely.
Session fixtures (deployed contracts) are created before that snapshot and survive it, as long
as a test names them as arguments: one fetched with request.getfixturevalue() inside the test is
created after the snapshot and reverted with it.
"""

import time

import pytest
from eth_account import Account
from eth_utils import keccak

from standins.anvil import Anvil
from standins.cctp import deploy_cctp, link
from standins.cctp_v2 import deploy_cctp_v2, link_v2
from standins.contracts import artifacts, deploy_test_token

CHAIN_A_ID = 31337
CHAIN_B_ID = 31338
DOMAIN_A = 0
DOMAIN_B = 3
# The test attester (Iris's signer in production): a fixed key, not one of the dev accounts.
ATTESTER_KEY = keccak(b"qtg standins test attester").hex()

CHAIN_FIXTURES = ("chain_a", "chain_b")


@pytest.fixture(scope="session")
def compiled():
    """Every stand-in contract's ABI and bytecode (compiled through node on first use)."""
    return artifacts()


@pytest.fixture(scope="session")
def chain_a():
    with Anvil(chain_id=CHAIN_A_ID) as chain:
        yield chain


@pytest.fixture(scope="session")
def chain_b():
    with Anvil(chain_id=CHAIN_B_ID) as chain:
        yield chain


@pytest.fixture(autouse=True)
def _rewind_chains(request):
    """Snapshot the chains this test uses; afterwards revert, empty the mempool, automine on."""
    chains = [request.getfixturevalue(n) for n in CHAIN_FIXTURES if n in request.fixturenames]
    snapshots = [(chain, chain.snapshot()) for chain in chains]
    yield
    for chain, snapshot in snapshots:
        chain.drop_all_transactions()
        chain.set_automine(True)
        assert chain.revert(snapshot), "snapshot could not be reverted"
        # Mining many blocks in a second runs the chain's clock ahead of the wall clock (each
        # block one second after its parent), and reverting keeps that offset: put it back, or
        # a later block could get the same timestamp as the one it replaces.
        chain.rpc("evm_setTime", int(time.time()))


@pytest.fixture(scope="session")
def token6(chain_a, compiled):
    """A 6-decimal TestToken on chain A, owned by dev account 0."""
    return deploy_test_token(chain_a.web3, chain_a.accounts[0], decimals=6, symbol="TST6")


@pytest.fixture(scope="session")
def token18(chain_a, compiled):
    """An 18-decimal TestToken on chain A, owned by dev account 0."""
    return deploy_test_token(chain_a.web3, chain_a.accounts[0], decimals=18, symbol="TST18")


@pytest.fixture(scope="session")
def attester():
    return Account.from_key(ATTESTER_KEY)


@pytest.fixture(scope="session")
def cctp(chain_a, chain_b, compiled, attester):
    """CCTP deployed on both chains (owner: dev account 0) and linked A <-> B."""
    a = deploy_cctp(chain_a.web3, chain_a.accounts[0], domain=DOMAIN_A, attester=attester.address)
    b = deploy_cctp(chain_b.web3, chain_b.accounts[0], domain=DOMAIN_B, attester=attester.address)
    link(a, b)
    return a, b


@pytest.fixture(scope="session")
def cctp_v2(chain_a, chain_b, cctp, attester):
    """CCTP V2 deployed beside V1 on both chains (same USDC; fees to dev account 5), linked."""
    a, b = cctp
    a2 = deploy_cctp_v2(
        chain_a.web3,
        chain_a.accounts[0],
        domain=DOMAIN_A,
        attester=attester.address,
        usdc=a.usdc,
        fee_recipient=chain_a.accounts[5].address,
    )
    b2 = deploy_cctp_v2(
        chain_b.web3,
        chain_b.accounts[0],
        domain=DOMAIN_B,
        attester=attester.address,
        usdc=b.usdc,
        fee_recipient=chain_b.accounts[5].address,
    )
    link_v2(a2, b2)
    return a2, b2

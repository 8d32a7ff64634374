"""Two devchains with CCTP deployed and linked, the Iris stand-in watching them, and the
reviewed configuration (chains.yaml) that points the product at both.

The chains are named ``ethereum`` (chain id 31337, CCTP domain 0) and ``arbitrum`` (31338,
domain 3), the ``cctp`` template's default parameters. Every test gets its chains back as it
found them (snapshot/revert, mempool emptied, automine on) and the Iris stand-in without faults.
"""

from decimal import Decimal

import pytest
import yaml
from eth_account import Account
from eth_utils import keccak

from standins.anvil import KEEP_EVERY_STATE, Anvil
from standins.cctp import deploy_cctp, link
from standins.contracts import artifacts
from standins.iris import IrisService, SourceDomain

DOMAIN_A = 0
DOMAIN_B = 3
ATTESTER_KEY = keccak(b"qtg venues cctp test attester").hex()
IRIS_CONFIRMATIONS = 3
# The reviewed explorer link templates of the two chains (the console links each transaction).
EXPLORERS = {DOMAIN_A: "https://etherscan.io/tx/{tx}", DOMAIN_B: "https://arbiscan.io/tx/{tx}"}
USDC = 10**6


def units(amount: str) -> int:
    return int(Decimal(amount) * USDC)


@pytest.fixture(scope="session")
def chain_a():
    with Anvil(chain_id=31337, finalized_lag=2, extra_args=KEEP_EVERY_STATE) as chain:
        yield chain


@pytest.fixture(scope="session")
def chain_b():
    with Anvil(chain_id=31338, finalized_lag=2, extra_args=KEEP_EVERY_STATE) as chain:
        yield chain


@pytest.fixture(scope="session")
def attester():
    return Account.from_key(ATTESTER_KEY)


@pytest.fixture(scope="session")
def cctp(chain_a, chain_b, attester):
    artifacts()
    a = deploy_cctp(chain_a.web3, chain_a.accounts[0], domain=DOMAIN_A, attester=attester.address)
    b = deploy_cctp(chain_b.web3, chain_b.accounts[0], domain=DOMAIN_B, attester=attester.address)
    link(a, b)
    return a, b


@pytest.fixture(scope="session")
def iris_service(chain_a, chain_b, cctp):
    a, b = cctp
    domains = {
        DOMAIN_A: SourceDomain(chain_a.url, a.transmitter.address),
        DOMAIN_B: SourceDomain(chain_b.url, b.transmitter.address),
    }
    with IrisService(domains, attester_key=ATTESTER_KEY, confirmations=IRIS_CONFIRMATIONS) as iris:
        yield iris


@pytest.fixture
def iris(iris_service):
    iris_service.reset()
    yield iris_service
    iris_service.reset()


@pytest.fixture(autouse=True)
def _rewind_chains(request):
    chains = [
        request.getfixturevalue(n) for n in ("chain_a", "chain_b") if n in request.fixturenames
    ]
    snapshots = [(chain, chain.snapshot()) for chain in chains]
    yield
    for chain, snapshot in snapshots:
        chain.set_interval_mining(0)
        chain.drop_all_transactions()
        chain.set_automine(True)
        assert chain.revert(snapshot), "snapshot could not be reverted"


TREASURY = "treasury"  # dev account 1 on chain A: burns
RELAYER = "relayer"  # dev account 3 on chain B: submits mints
VAULT = "vault"  # dev account 4 on chain B: a configured destination without a key
KEY_A_ENV = "QTG_TEST_CCTP_TREASURY_KEY"
KEY_B_ENV = "QTG_TEST_CCTP_RELAYER_KEY"
RPC_A_ENV, RPC_B_ENV, IRIS_ENV = "QTG_TEST_RPC_A", "QTG_TEST_RPC_B", "QTG_TEST_IRIS_URL"
CONFIRMATIONS = 3


@pytest.fixture
def rpc_a(chain_a):
    """The URL the product uses for chain A (a test may put a proxy in front of it)."""
    return chain_a.url


@pytest.fixture
def rpc_b(chain_b):
    """The URL the product uses for chain B (a test may put a proxy in front of it)."""
    return chain_b.url


@pytest.fixture
def chains_config(tmp_path, settings, monkeypatch, chain_a, chain_b, cctp, iris, rpc_a, rpc_b):
    """chains.yaml for the two devchains and the Iris stand-in, read by the product."""
    a, b = cctp
    monkeypatch.setenv(RPC_A_ENV, rpc_a)
    monkeypatch.setenv(RPC_B_ENV, rpc_b)
    monkeypatch.setenv(IRIS_ENV, iris.url)
    monkeypatch.setenv(KEY_A_ENV, chain_a.accounts[1].private_key)
    monkeypatch.setenv(KEY_B_ENV, chain_b.accounts[3].private_key)

    def entry(chain, env, domain, account, key_env, dev_index):
        return {
            "kind": "evm",
            "chain_id": chain.chain_id,
            "rpc_url_env": env,
            "confirmations": CONFIRMATIONS,
            "block_seconds": 1,
            "replace_after_seconds": 600,
            "max_fee_gwei": 100,
            "broadcast_window_seconds": 5,
            "rpc_timeout_seconds": 5,
            "tokens": {"USDC": {"address": domain.usdc.address, "decimals": 6}},
            "explorer_tx_url": EXPLORERS[domain.domain],
            "accounts": {
                account: {
                    "address": chain.accounts[dev_index].address,
                    "key": {"env": key_env},
                }
            },
            "cctp": {
                "domain": domain.domain,
                "token_messenger": domain.messenger.address,
                "message_transmitter": domain.transmitter.address,
                "usdc": domain.usdc.address,
            },
        }

    arbitrum = entry(chain_b, RPC_B_ENV, b, RELAYER, KEY_B_ENV, 3)
    arbitrum["accounts"][VAULT] = {"address": chain_b.accounts[4].address}  # no key
    arbitrum["cctp"]["relayer"] = RELAYER
    config = {
        "version": 1,
        "iris_url_env": IRIS_ENV,
        "chains": {
            "ethereum": entry(chain_a, RPC_A_ENV, a, TREASURY, KEY_A_ENV, 1),
            "arbitrum": arbitrum,
        },
    }
    path = tmp_path / "chains.yaml"
    path.write_text(yaml.safe_dump(config))
    settings.QTG_CHAINS_CONFIG = str(path)
    from venues.signing import forget_signers

    forget_signers()
    yield config
    forget_signers()

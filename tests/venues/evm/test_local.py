"""``QTG_VENUES=local``: the devchain ``make run`` starts carries a transfer end to end."""

import os

import httpx
import pytest

from movements.states import RequestState
from qtg.core.venues import provide_venues
from standins import local as standins_local
from standins.local import evm as local
from tests.venues.evm.conftest import settle, transfer
from venues.evm.client import web3_for
from venues.evm.config import evm_chain
from venues.signing import forget_signers

pytestmark = [pytest.mark.devchain, pytest.mark.django_db]


@pytest.fixture
def local_devchain(tmp_path, settings, monkeypatch):
    env: dict[str, str] = {}
    processes = local.start(env, tmp_path)
    try:
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        settings.QTG_CHAINS_CONFIG = env["QTG_CHAINS_CONFIG"]
        provide_venues([local.TREASURY])
        forget_signers()
        yield env
    finally:
        standins_local.stop(processes)
        forget_signers()


def test_the_local_devchain_is_configured_for_the_product_and_carries_a_transfer(
    local_devchain, fast_worker, creator
):
    chain = evm_chain(local.CHAIN)
    usdc = chain.asset("USDC")
    recipient = "0x000000000000000000000000000000000000dEaD"
    assert local_devchain["QTG_CHAINS_CONFIG"].endswith("chains.yaml")
    assert os.environ[local.RPC_ENV] == local_devchain[local.RPC_ENV]
    assert web3_for(chain).eth.chain_id == local.CHAIN_ID
    # Two endpoints, each a stand-in proxy whose faults a shell can switch on.
    assert chain.endpoint_envs == (local.RPC_ENV, local.RPC_ENV_B)
    assert chain.post_final_watch == local.POST_FINAL_WATCH
    control = {"jsonrpc": "2.0", "id": 1, "method": "standin_trailHead", "params": [None]}
    for env in chain.endpoint_envs:
        assert httpx.post(local_devchain[env], json=control).json()["result"] is True

    request = settle(transfer(creator, recipient, amount="2.5"), None, mine=0, timeout=60)

    assert request.request_state == RequestState.COMPLETED
    token = web3_for(chain).eth.contract(
        address=usdc.address,
        abi=[
            {
                "name": "balanceOf",
                "type": "function",
                "stateMutability": "view",
                "inputs": [{"name": "a", "type": "address"}],
                "outputs": [{"name": "", "type": "uint256"}],
            }
        ],
    )
    assert token.functions.balanceOf(recipient).call() == 2_500_000

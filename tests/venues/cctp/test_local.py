"""QTG_VENUES=local for CCTP: ``standins.local.cctp.start`` brings up both devchains, CCTP on
each, and the Iris stand-in as a process; the configuration it writes is what the product
reads, and an attestation from that Iris mints on the other chain."""

import time
from pathlib import Path

import httpx
import pytest
import yaml

from standins import local as standins_local
from standins.anvil import dev_accounts
from standins.cctp import CctpDomain, address_to_bytes32, messages_sent
from standins.contracts import at, transact
from standins.local import cctp as local
from venues.cctp import config as cctp_config
from venues.ethlib import Web3

pytestmark = [pytest.mark.devchain, pytest.mark.standin, pytest.mark.django_db]


@pytest.fixture
def started(tmp_path):
    # What an earlier run left behind names chains that are gone: not reused.
    stale = {"devchain": {"kind": "evm", "chain_id": 31337, "rpc_url_env": "QTG_GONE_RPC_URL"}}
    (tmp_path / "chains.yaml").write_text(yaml.safe_dump({"version": 1, "chains": stale}))
    env: dict[str, str] = {}
    processes = local.start(env, tmp_path)
    yield env, processes
    standins_local.stop(processes)


def domain(w3, cctp):
    owner = dev_accounts()[0]
    return CctpDomain(
        w3,
        cctp["domain"],
        owner,
        at(w3, "MessageTransmitter", cctp["message_transmitter"]),
        at(w3, "TokenMessenger", cctp["token_messenger"]),
        at(w3, "StandinUSDC", cctp["usdc"]),
    )


def test_two_chains_cctp_and_iris_from_one_call(started, settings, monkeypatch):
    env, processes = started
    assert len(processes) == 3  # two anvils and the Iris stand-in
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    settings.QTG_CHAINS_CONFIG = env["QTG_CHAINS_CONFIG"]
    written = yaml.safe_load(Path(env["QTG_CHAINS_CONFIG"]).read_text())

    chains = cctp_config.cctp_chains()
    assert {name: c.domain for name, c in chains.items()} == {"devchain": 0, "devchain-b": 3}
    assert cctp_config.iris_url() == env["QTG_IRIS_URL"]
    w3 = {
        name: Web3(Web3.HTTPProvider(env[entry["rpc_url_env"]]))
        for name, entry in written["chains"].items()
    }
    assert (w3["devchain"].eth.chain_id, w3["devchain-b"].eth.chain_id) == (31337, 31338)
    a = domain(w3["devchain"], written["chains"]["devchain"]["cctp"])
    b = domain(w3["devchain-b"], written["chains"]["devchain-b"]["cctp"])
    treasury = written["chains"]["devchain"]["accounts"]["treasury"]["address"]
    assert a.usdc_balance(treasury) == local.DEMO_USDC_UNITS
    assert chains["devchain-b"].relayer == "relayer"
    assert {entry["rpc_url_env"] for entry in written["chains"].values()} <= set(env)
    assert set(written["chains"]["devchain-b"]["accounts"]) == {"relayer", "vault"}

    sender = dev_accounts()[1]
    recipient = dev_accounts()[4].address
    transact(a.w3, sender, a.usdc.functions.approve(a.messenger.address, 5 * 10**6))
    receipt = transact(
        a.w3,
        sender,
        a.messenger.functions.depositForBurn(
            5 * 10**6, 3, address_to_bytes32(recipient), a.usdc.address
        ),
    )
    (raw,) = messages_sent(a.transmitter, receipt)
    url = f"{env['QTG_IRIS_URL']}/v2/messages/0"
    params = {"transactionHash": receipt["transactionHash"].to_0x_hex()}
    deadline = time.monotonic() + 20
    while True:  # the local chains mine a block a second: three confirmations
        (message,) = httpx.get(url, params=params).json()["messages"]
        if message["status"] == "complete" or time.monotonic() > deadline:
            break
        time.sleep(0.25)
    assert message["status"] == "complete"
    assert bytes.fromhex(message["message"][2:]) == raw
    b.receive_message(dev_accounts()[3], raw, bytes.fromhex(message["attestation"][2:]))
    assert b.usdc_balance(recipient) == 5 * 10**6

    # CCTP V2 beside V1 (the seeded V2 fast transfer runs on it): configured, and Iris quotes
    # its fees through the product's client.
    from venues.cctp.iris import IrisClient

    assert chains["devchain"].has_v2 and chains["devchain-b"].has_v2
    assert chains["devchain"].token_messenger_v2 != chains["devchain"].token_messenger
    with IrisClient(env["QTG_IRIS_URL"]) as iris:
        assert iris.fee_bps(0, 3) == {1000: 1, 2000: 0}


def test_after_the_evm_adapter_its_devchain_is_reused_not_duplicated(tmp_path):
    from qtg.core.actors import Actor
    from standins.local import evm as evm_local
    from venues.models import ChainTransaction, NonceCursor, TxState
    from venues.transactions import chain_transaction_create

    # What an earlier run (other chains under the same names) left in the database.
    NonceCursor.objects.create(chain="devchain", sender=dev_accounts()[1].address, next_nonce=7)
    old = chain_transaction_create(
        chain="devchain-b",
        sender=dev_accounts()[3].address,
        nonce=4,
        unsigned={},
        actor=Actor.system("tests"),
        family="evm",
    )

    env: dict[str, str] = {}
    processes = evm_local.start(env, tmp_path)
    try:
        evm_usdc = yaml.safe_load((tmp_path / "chains.yaml").read_text())["chains"]["devchain"][
            "tokens"
        ]["USDC"]
        processes += local.start(env, tmp_path)
        written = yaml.safe_load(Path(env["QTG_CHAINS_CONFIG"]).read_text())

        # The EVM adapter's anvil and its two endpoint proxies, devchain-b and Iris.
        assert len(processes) == 5
        chain_ids = [entry["chain_id"] for entry in written["chains"].values()]
        assert sorted(chain_ids) == [31337, 31338]  # one entry per chain
        devchain = written["chains"]["devchain"]
        assert devchain["tokens"]["USDC"] == evm_usdc  # the EVM demo's token is kept
        assert devchain["cctp"]["domain"] == 0
        assert env["QTG_DEVCHAIN_RPC_URL"] and env["QTG_DEVCHAIN_B_RPC_URL"]
        assert not NonceCursor.objects.filter(chain="devchain", next_nonce=7).exists()
        old.refresh_from_db()
        assert old.state == TxState.FAILED  # CREATED cannot be DROPPED: closed with evidence
        assert "earlier run" in old.events.last().evidence["finding"]
        assert ChainTransaction.objects.filter(state=TxState.CREATED).count() == 0
    finally:
        standins_local.stop(processes)


def test_the_seeded_v2_fast_transfer_completes_on_the_local_stand_ins(
    started, settings, monkeypatch, creator
):
    """``QTG_VENUES=local make run`` seeds ``local-cctp-v2-fast-1``: created as the seed does,
    run by the worker services on the chains and Iris ``local.start`` brought up, it completes
    with amount - fee at ``vault``."""
    from decimal import Decimal

    from movements.services import movement_approve, movement_create
    from movements.states import RequestState
    from qtg.core.actors import Actor
    from qtg.core.venues import provide_venues
    from sandbox.management.commands.seed_demo import LOCAL_DEMO_MOVEMENTS
    from tests.execution.conftest import run_workers_once
    from venues.signing import forget_signers

    env, _ = started
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    settings.QTG_CHAINS_CONFIG = env["QTG_CHAINS_CONFIG"]
    settings.QTG_VENUES = "local"
    settings.QTG_EXECUTOR_DEFAULT_PROVIDER = "venues"
    settings.QTG_OBSERVE_POLL_SECONDS = 0
    forget_signers()
    (seeded,) = [m for m in LOCAL_DEMO_MOVEMENTS if m[0] == "local-cctp-v2-fast-1"]
    _, template, asset, amount, source, destination, params, _, _ = seeded
    provide_venues([source, destination])
    written = yaml.safe_load(Path(env["QTG_CHAINS_CONFIG"]).read_text())
    b_cctp = written["chains"]["devchain-b"]["cctp"]
    vault = written["chains"]["devchain-b"]["accounts"]["vault"]["address"]
    w3b = Web3(Web3.HTTPProvider(env[written["chains"]["devchain-b"]["rpc_url_env"]]))
    usdc_b = at(w3b, "StandinUSDC", b_cctp["usdc"])
    before = usdc_b.functions.balanceOf(vault).call()

    request = movement_create(
        template=template,
        asset=asset,
        amount=amount,
        source=source,
        destination=destination,
        params=params,
        actor=Actor.for_user(creator),
    )
    movement_approve(request=request, actor=Actor.system("tests-approver"))
    deadline = time.monotonic() + 90
    while request.request_state not in (RequestState.COMPLETED, RequestState.FAILED):
        assert time.monotonic() < deadline, dict(
            request.nodes.values_list("node_key", "node_state")
        )
        run_workers_once()
        time.sleep(0.2)
        request.refresh_from_db()
    forget_signers()

    assert request.request_state == RequestState.COMPLETED, request.failure_reason
    units = int(Decimal(amount) * 10**6)
    fee = -(-units // 10_000)  # the local Iris charges 1 bp on fast, rounded up
    assert usdc_b.functions.balanceOf(vault).call() == before + units - fee

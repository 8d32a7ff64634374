"""A worker process killed (SIGKILL) after the node took its transaction and before the worker
recorded the answer: recovery finds the transaction by its signature, and the money moves once.
Real Celery worker processes, PostgreSQL, the local node with its clock running."""

import pytest
import yaml
from solders.keypair import Keypair

from movements.services import movement_approve, movement_create
from qtg.core.actors import Actor
from standins.solana import LocalSolana, Settings
from tests.execution.conftest import Cluster, node_path, wait_for
from venues.models import ChainTransaction

from .conftest import TREASURY, Solana, chains_config, lamports

pytestmark = [
    pytest.mark.standin,
    pytest.mark.slow,
    pytest.mark.postgres,
    pytest.mark.django_db(transaction=True),
]


@pytest.fixture
def running_solana(solana, tmp_path):
    """The treasury of the ``solana`` fixture on a node whose clock runs (workers poll it on
    their own), with a client timeout long enough for a worker to be caught inside a send (and
    short enough that the lease the fence extended past it lapses well within the test)."""
    with LocalSolana(Settings(slot_seconds=0.1, confirmed_after=2, finalized_after=6)) as node:
        node.airdrop(solana.treasury.pubkey(), 10 * 10**9)
        mint = node.create_mint(decimals=6)
        config = chains_config(mint, solana.treasury)
        config["chains"]["solana"]["rpc_timeout_seconds"] = 20
        path = tmp_path / "running-chains.yaml"
        path.write_text(yaml.safe_dump(config))
        yield Solana(node, solana.treasury, mint, str(path))


@pytest.fixture
def workers(django_db_setup, tmp_path, running_solana, settings, monkeypatch):
    if not settings.DB_IS_POSTGRES:
        pytest.skip("real worker processes need PostgreSQL")
    for name, value in running_solana.env().items():
        monkeypatch.setenv(name, value)
    cluster = Cluster(tmp_path / "cluster", workers=1)
    (tmp_path / "cluster").mkdir()
    cluster.env.update(running_solana.env())
    cluster.env["QTG_VENUES"] = "local"
    settings.QTG_CHAINS_CONFIG = running_solana.config_path
    yield cluster.start()
    cluster.stop()


def test_a_worker_killed_between_send_and_record_is_recovered_by_signature(
    running_solana, workers, creator
):
    node = running_solana.node
    recipient = Keypair().pubkey()
    # The node takes the transaction at once and holds its answer for a minute.
    node.slow(60, method="sendTransaction", times=1)
    movement = movement_create(
        template="sol_transfer",
        actor=Actor.for_user(creator),
        asset="SOL",
        amount="4.2",
        source=TREASURY,
        destination=str(recipient),
    )
    movement_approve(request=movement, actor=Actor.system("tests-approver"))

    sent = wait_for(lambda: node.state()["sends"], timeout=60, message="nothing was sent")
    [signature] = sent
    wait_for(lambda: signature in node.state()["landed"], timeout=10, message="never landed")
    transfer = movement.nodes.get(node_key="transfer")
    assert transfer.node_state == "SUBMITTING"
    for pid in workers.pids():
        workers.kill(pid)
    workers.start_worker()

    def settled():
        movement.refresh_from_db()
        return movement.request_state in ("COMPLETED", "FAILED", "MANUAL_INTERVENTION")

    wait_for(settled, timeout=120, message="the movement did not settle")

    assert movement.request_state == "COMPLETED"
    path = node_path(movement, "transfer")
    assert "UNKNOWN" in path, path
    [record] = ChainTransaction.objects.filter(movement=movement)
    assert record.tx_hash == signature
    assert record.state == "FINALIZED"
    assert movement.nodes.get(node_key="transfer").external_ref == signature
    from tests.standins.test_solana_node import rpc

    assert rpc(node, lambda c: c.get_balance(recipient)).value == lamports("4.2")

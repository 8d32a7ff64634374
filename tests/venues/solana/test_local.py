"""`make run` with QTG_VENUES=local: the Solana adapter starts the local node as a child
process, funds a demo treasury, writes the chains config, and a SOL and a USDC transfer made
through the sol_transfer template then land (what the README shows)."""

from pathlib import Path

import pytest
import yaml
from solders.keypair import Keypair

from qtg.core.venues import provide_venues
from reservations.services import hardcap_ensure
from standins.local import solana as local
from venues.models import ChainTransaction
from venues.signing import forget_signers

from .conftest import drive

pytestmark = [pytest.mark.standin, pytest.mark.slow, pytest.mark.django_db(transaction=True)]


class ChildNode:
    """What ``drive`` needs of a node: moving its slots through the control API."""

    def __init__(self, url: str) -> None:
        self.url = url

    def advance(self, slots: int) -> None:
        local._control(self.url, "advance", {"slots": slots})


@pytest.fixture
def started(tmp_path, settings, monkeypatch):
    env: dict[str, str] = {}
    processes = local.start(env, tmp_path)
    monkeypatch.setenv("QTG_SOLANA_RPC_URL", env["QTG_SOLANA_RPC_URL"])
    settings.QTG_CHAINS_CONFIG = env["QTG_CHAINS_CONFIG"]
    settings.QTG_VENUES = "local"
    settings.QTG_OBSERVE_POLL_SECONDS = 0
    settings.QTG_RETRY_BASE_SECONDS = 0
    provide_venues([local.TREASURY])
    hardcap_ensure(asset="SOL", max_in_flight="1000", note="local demo test")
    forget_signers()
    yield env
    for process in processes:
        process.terminate()
        process.wait(timeout=10)
    forget_signers()


def test_the_local_node_serves_a_sol_and_a_usdc_transfer(started, make_movement, tmp_path):
    config = yaml.safe_load(Path(started["QTG_CHAINS_CONFIG"]).read_text())
    treasury = config["chains"]["solana"]["accounts"][local.TREASURY]
    assert "key" in treasury and "file" in treasury["key"]
    assert (tmp_path / "solana-treasury.json").stat().st_mode & 0o077 == 0
    node = ChildNode(started["QTG_SOLANA_RPC_URL"])

    movements = [
        make_movement(
            "sol_transfer",
            approve=True,
            asset=asset,
            amount=amount,
            source=local.TREASURY,
            destination=str(Keypair().pubkey()),
        )
        for asset, amount in (("SOL", "2.5"), ("USDC", "125.000001"))
    ]
    settled = [drive(movement, node) for movement in movements]

    assert [movement.request_state for movement in settled] == ["COMPLETED", "COMPLETED"]
    assert ChainTransaction.objects.filter(state="FINALIZED").count() == 2

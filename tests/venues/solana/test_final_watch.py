"""A Solana transfer final by the chain's commitment is still looked at for the chain's
``post_final_watch`` before the movement completes (as on EVM chains, issue 25 item 3): the
observe node keeps it open (reservation HELD), then completes."""

import time
from pathlib import Path

import pytest
import yaml
from solders.keypair import Keypair

from tests.execution.conftest import run_workers_once
from venues.models import ChainTransaction

from .conftest import TREASURY, drive

pytestmark = [pytest.mark.standin, pytest.mark.django_db(transaction=True)]
WATCH = 3


@pytest.fixture
def watched(solana):
    path = solana.config_path
    config = yaml.safe_load(Path(path).read_text())
    config["chains"]["solana"]["post_final_watch"] = WATCH
    Path(path).write_text(yaml.safe_dump(config))
    return solana


def test_a_final_transfer_is_watched_before_the_movement_completes(watched, make_movement):
    movement = make_movement(
        "sol_transfer",
        approve=True,
        asset="SOL",
        amount="0.25",
        source=TREASURY,
        destination=str(Keypair().pubkey()),
    )
    node = watched.node
    for _ in range(60):  # to finality, inside the watch
        run_workers_once()
        observe = movement.nodes.get(node_key="transfer_observe")
        if (observe.result or {}).get("watch_until"):
            break
        node.advance(1)
    [record] = ChainTransaction.objects.filter(movement=movement)
    movement.refresh_from_db()
    assert record.state == "FINALIZED"
    assert observe.node_state != "COMPLETED"
    assert movement.request_state == "EXECUTING"  # the reservation stays HELD meanwhile
    assert observe.result["final_since"]

    time.sleep(WATCH)
    movement = drive(movement, node, max_passes=20)
    observe = movement.nodes.get(node_key="transfer_observe")
    assert movement.request_state == "COMPLETED"
    assert observe.result["watched_seconds"] == WATCH

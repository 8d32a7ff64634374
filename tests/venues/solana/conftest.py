"""A local Solana node (standins.solana) with a funded treasury and a 6-decimal USDC mint, and
the reviewed chain config that points the product at it.

The node's clock is paused: tests move slots themselves (``advance``), so "lands at the last
valid height" and "not final yet" are exact, not races.
"""

import json
import time
from dataclasses import dataclass
from decimal import Decimal

import pytest
import yaml
from solders.keypair import Keypair

from movements.models import MovementRequest
from qtg.core.venues import provide_venues
from reservations.services import hardcap_ensure
from standins.solana import LocalSolana, Settings
from tests.execution.conftest import run_workers_once
from venues.signing import forget_signers

# Skipped slots and a first slot far from 0: block height < slot, as on mainnet.
SETTINGS = Settings(
    slot_seconds=3600,
    confirmed_after=2,
    finalized_after=6,
    blockhash_validity=30,
    skip_every=4,
    first_slot=1000,
)
TREASURY = "sol-treasury"
KEY_ENV = "QTG_TEST_SOLANA_TREASURY_KEY"
URL_ENV = "QTG_TEST_SOLANA_RPC_URL"


@dataclass
class Solana:
    node: LocalSolana
    treasury: Keypair
    usdc_mint: str
    config_path: str

    def env(self) -> dict[str, str]:
        """What a worker process needs to reach the node and sign for the treasury."""
        return {
            KEY_ENV: json.dumps(list(bytes(self.treasury))),
            URL_ENV: self.node.url,
            "QTG_CHAINS_CONFIG": self.config_path,
        }


def chains_config(mint: str, treasury: Keypair, **commitment) -> dict:
    return {
        "version": 1,
        "chains": {
            "solana": {
                "kind": "solana",
                "rpc_url_env": URL_ENV,
                "rpc_timeout_seconds": 2,
                "commitment": {
                    "blockhash": "confirmed",
                    "landed": "confirmed",
                    "final": "finalized",
                    **commitment,
                },
                "tokens": {"SOL": {"decimals": 9}, "USDC": {"mint": mint, "decimals": 6}},
                "accounts": {
                    TREASURY: {"address": str(treasury.pubkey()), "key": {"env": KEY_ENV}}
                },
            }
        },
    }


@pytest.fixture(scope="module")
def solana_node():
    with LocalSolana(SETTINGS) as node:
        node.pause()
        yield node


@pytest.fixture
def solana(solana_node, tmp_path, settings, monkeypatch):
    """A fresh treasury (10 SOL, 1000 USDC) on the shared node, and the config naming it."""
    node = solana_node
    node.clear_faults()
    treasury = Keypair()
    node.airdrop(treasury.pubkey(), 10 * 10**9)
    mint = node.create_mint(decimals=6)
    node.mint_to(mint, treasury.pubkey(), "1000")
    path = tmp_path / "chains.yaml"
    path.write_text(yaml.safe_dump(chains_config(mint, treasury)))
    setup = Solana(node, treasury, mint, str(path))
    for name, value in setup.env().items():
        monkeypatch.setenv(name, value)
    settings.QTG_CHAINS_CONFIG = str(path)
    settings.QTG_OBSERVE_POLL_SECONDS = 0
    settings.QTG_RETRY_BASE_SECONDS = 0
    settings.QTG_RETRY_MAX_SECONDS = 0
    settings.QTG_VENUES = "local"
    forget_signers()
    provide_venues([TREASURY])
    hardcap_ensure(asset="SOL", max_in_flight="1000000", note="solana tests")
    yield setup
    forget_signers()


def drive(
    request: MovementRequest,
    node: LocalSolana,
    *,
    until=("COMPLETED", "FAILED"),
    slots_per_pass: int = 1,
    max_passes: int = 400,
) -> MovementRequest:
    """Worker passes in-process, the chain moving ``slots_per_pass`` slots after each, until
    the movement reaches a state in ``until``."""
    for _ in range(max_passes):
        request.refresh_from_db()
        if request.request_state in until:
            return request
        run_workers_once()
        node.advance(slots_per_pass)
    states = dict(request.nodes.values_list("node_key", "node_state"))
    raise AssertionError(f"movement stuck in {request.request_state}: {states}")


def wait_until(predicate, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError("timed out")


def lamports(amount: str) -> int:
    return int(Decimal(amount).scaleb(9))

"""A Solana chain listed with several RPC endpoints (``rpc_endpoints``, ``max_head_lag_slots``):
EXPIRED is concluded only when every endpoint that is not lagging agrees the transaction never
landed; a landing seen at any endpoint means landed; an endpoint that errs blocks the
conclusion. The second endpoint is a JSON-RPC proxy in front of the same local node that
misses a landing, lags or errs (standins.solana.proxy)."""

import pytest
import yaml
from django.core.exceptions import ImproperlyConfigured
from solders.keypair import Keypair

from standins.solana.proxy import SolanaRpcProxy
from tests.execution.conftest import run_workers_once
from venues.models import ChainTransaction
from venues.solana.config import parse_chain

from .conftest import URL_ENV, chains_config, drive, lamports
from .test_transfers import balance, transfer

pytestmark = [pytest.mark.standin, pytest.mark.django_db(transaction=True)]

URL_B_ENV = "QTG_TEST_SOLANA_RPC_URL_B"
MAX_LAG = 50


@pytest.fixture
def proxy(solana):
    with SolanaRpcProxy(solana.node.url) as proxy:
        yield proxy


def list_two_endpoints(solana, tmp_path, settings, monkeypatch, *, primary: str, second: str):
    """The chain's config lists two endpoints: ``primary`` (rpc_url_env) and ``second``."""
    config = chains_config(solana.usdc_mint, solana.treasury)
    config["chains"]["solana"]["rpc_endpoints"] = [URL_B_ENV]
    config["chains"]["solana"]["max_head_lag_slots"] = MAX_LAG
    path = tmp_path / "chains-two-endpoints.yaml"
    path.write_text(yaml.safe_dump(config))
    monkeypatch.setenv("QTG_CHAINS_CONFIG", str(path))
    settings.QTG_CHAINS_CONFIG = str(path)
    monkeypatch.setenv(URL_ENV, primary)
    monkeypatch.setenv(URL_B_ENV, second)


def sent(movement) -> ChainTransaction:
    for _ in range(20):
        run_workers_once()
        first = ChainTransaction.objects.filter(movement=movement).first()
        if first is not None and first.state == "BROADCAST":
            return first
    raise AssertionError("the transfer was not sent")


def test_a_second_endpoint_that_sees_the_landing_prevents_expiry_and_a_second_payment(
    solana, proxy, tmp_path, settings, monkeypatch, make_movement
):
    # The primary endpoint's status index misses the landing (null, at a context slot that
    # covers everything): alone, it would prove the transaction dead once its blockhash is.
    list_two_endpoints(
        solana, tmp_path, settings, monkeypatch, primary=proxy.url, second=solana.node.url
    )
    recipient = Keypair().pubkey()
    movement = transfer(make_movement, asset="SOL", amount="3", to=recipient)
    first = sent(movement)
    proxy.miss_landing(first.tx_hash)
    solana.node.advance(1)
    assert first.tx_hash in solana.node.state()["landed"]
    solana.node.expire_blockhashes()

    movement = drive(movement, solana.node)

    assert movement.request_state == "COMPLETED"
    assert balance(solana.node, recipient) == lamports("3")  # paid once
    [record] = ChainTransaction.objects.filter(movement=movement)
    assert record.tx_hash == first.tx_hash and record.state == "FINALIZED"
    assert not record.events.filter(to_state="EXPIRED").exists()
    landed = record.events.get(to_state="CONFIRMED").evidence
    assert landed["seen_at"] == URL_B_ENV
    answers = {answer["endpoint"]: answer for answer in landed["endpoints"]}
    assert answers[URL_ENV]["status"] is None
    assert answers[URL_B_ENV]["status"]["slot"] == landed["slot"]


def test_an_erroring_second_endpoint_blocks_expiry_until_it_answers(
    solana, proxy, tmp_path, settings, monkeypatch, make_movement
):
    list_two_endpoints(
        solana, tmp_path, settings, monkeypatch, primary=solana.node.url, second=proxy.url
    )
    proxy.fail("*")
    recipient = Keypair().pubkey()
    solana.node.drop_next()  # accepted, never lands: dead once its blockhash is
    movement = transfer(make_movement, asset="SOL", amount="2", to=recipient)
    first = sent(movement)
    solana.node.expire_blockhashes()
    for _ in range(10):
        run_workers_once()
        solana.node.advance(1)

    first.refresh_from_db()
    assert first.state == "BROADCAST"  # not concluded while an endpoint does not answer
    assert ChainTransaction.objects.filter(movement=movement).count() == 1
    transfer_node = movement.nodes.get(node_key="transfer")
    assert "did not answer" in transfer_node.result["waiting_for"]

    proxy.fail(None)
    movement = drive(movement, solana.node)

    assert movement.request_state == "COMPLETED"
    assert balance(solana.node, recipient) == lamports("2")
    first.refresh_from_db()
    assert first.state == "EXPIRED"
    expired = first.events.get(to_state="EXPIRED").evidence
    answers = {answer["endpoint"]: answer for answer in expired["endpoints"]}
    assert set(answers) == {URL_ENV, URL_B_ENV}
    for answer in answers.values():
        assert answer["status"] is None and "error" not in answer
        assert answer["status_context_slot"] >= expired["final_slot"]


def test_a_lagging_second_endpoint_is_not_asked_for_the_conclusion(
    solana, proxy, tmp_path, settings, monkeypatch, make_movement
):
    list_two_endpoints(
        solana, tmp_path, settings, monkeypatch, primary=solana.node.url, second=proxy.url
    )
    recipient = Keypair().pubkey()
    solana.node.drop_next()
    movement = transfer(make_movement, asset="SOL", amount="2", to=recipient)
    first = sent(movement)
    solana.node.expire_blockhashes()
    proxy.trail_slots(MAX_LAG * 4)  # far behind: its null status covers nothing

    movement = drive(movement, solana.node)

    assert movement.request_state == "COMPLETED"
    assert balance(solana.node, recipient) == lamports("2")
    first.refresh_from_db()
    assert first.state == "EXPIRED"
    expired = first.events.get(to_state="EXPIRED").evidence
    answers = {answer["endpoint"]: answer for answer in expired["endpoints"]}
    assert answers[URL_B_ENV]["lagging"] is True
    assert answers[URL_B_ENV]["status_context_slot"] < expired["final_slot"]
    assert answers[URL_ENV]["lagging"] is False


def test_a_lagging_endpoint_that_shows_the_landing_still_means_landed(
    solana, proxy, tmp_path, settings, monkeypatch, make_movement
):
    # The primary misses the landing; the second endpoint is behind, but not behind the
    # landing: what it shows is on the chain.
    primary = SolanaRpcProxy(solana.node.url).start()
    try:
        list_two_endpoints(
            solana, tmp_path, settings, monkeypatch, primary=primary.url, second=proxy.url
        )
        recipient = Keypair().pubkey()
        movement = transfer(make_movement, asset="SOL", amount="1", to=recipient)
        first = sent(movement)
        primary.miss_landing(first.tx_hash)
        solana.node.advance(1)
        solana.node.expire_blockhashes()
        landed_slot = solana.node.state()["landed"][first.tx_hash]["slot"]
        proxy.trail_slots(solana.node.state()["slot"] - landed_slot)

        movement = drive(movement, solana.node, until=("COMPLETED", "FAILED"))
    finally:
        primary.stop()

    assert balance(solana.node, recipient) == lamports("1")
    assert ChainTransaction.objects.filter(movement=movement).count() == 1


@pytest.mark.parametrize(
    "extra, problem",
    [
        ({"rpc_endpoints": "QTG_B"}, "rpc_endpoints must be a list"),
        ({"rpc_endpoints": ["QTG_A"]}, "listed twice"),
        ({"max_head_lag_slots": -1}, "max_head_lag_slots"),
        ({"max_head_lag_slots": "5"}, "max_head_lag_slots"),
    ],
)
def test_a_malformed_endpoint_list_is_a_configuration_error(extra, problem):
    entry = {"kind": "solana", "rpc_url_env": "QTG_A", **extra}
    with pytest.raises(ImproperlyConfigured, match=problem):
        parse_chain("solana", entry)


def test_endpoints_are_listed_primary_first_with_the_lag_bound(monkeypatch):
    monkeypatch.setenv("QTG_A", "http://a")
    monkeypatch.setenv("QTG_B", "http://b")
    entry = {"kind": "solana", "rpc_url_env": "QTG_A", "rpc_endpoints": ["QTG_B"]}
    chain = parse_chain("solana", {**entry, "max_head_lag_slots": 20})
    assert chain.endpoint_urls() == [("QTG_A", "http://a"), ("QTG_B", "http://b")]
    assert chain.max_head_lag_slots == 20
    assert parse_chain("solana", {"kind": "solana", "rpc_url_env": "QTG_A"}).rpc_endpoints == ()


def test_a_final_transfer_is_not_called_gone_while_another_endpoint_shows_it_or_errs(
    solana, proxy, tmp_path, settings, monkeypatch, make_movement
):
    # Watched after finality; meanwhile the primary's status index loses it. The second
    # endpoint first errs (no conclusion), then answers with the landing: never a final_reorg.
    import time

    primary = SolanaRpcProxy(solana.node.url).start()
    try:
        list_two_endpoints(
            solana, tmp_path, settings, monkeypatch, primary=primary.url, second=proxy.url
        )
        config = yaml.safe_load(tmp_path.joinpath("chains-two-endpoints.yaml").read_text())
        config["chains"]["solana"]["post_final_watch"] = 4
        path = tmp_path / "chains-watched.yaml"
        path.write_text(yaml.safe_dump(config))
        monkeypatch.setenv("QTG_CHAINS_CONFIG", str(path))
        settings.QTG_CHAINS_CONFIG = str(path)
        movement = transfer(make_movement, asset="SOL", amount="0.5", to=Keypair().pubkey())
        for _ in range(60):
            run_workers_once()
            observe = movement.nodes.get(node_key="transfer_observe")
            if (observe.result or {}).get("watch_until"):
                break
            solana.node.advance(1)
        [record] = ChainTransaction.objects.filter(movement=movement)
        assert record.state == "FINALIZED"
        primary.miss_landing(record.tx_hash)
        proxy.fail("*")
        for _ in range(5):
            run_workers_once()
            solana.node.advance(1)
        record.refresh_from_db()
        movement.refresh_from_db()
        assert record.state == "FINALIZED"
        assert movement.request_state == "EXECUTING"

        proxy.fail(None)
        time.sleep(4)
        movement = drive(movement, solana.node, max_passes=30)
    finally:
        primary.stop()

    assert movement.request_state == "COMPLETED"
    record.refresh_from_db()
    assert record.state == "FINALIZED"
    assert not record.events.filter(to_state="PENDING", evidence__has_key="final_reorg").exists()

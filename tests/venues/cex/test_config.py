"""The exchange lane's configuration and shared budget: what a movement may name, how the
credential's budget is shared, and the local exchange ``make run`` starts."""

import os
import subprocess
from datetime import timedelta

import ccxt
import pytest
import yaml
from django.utils import timezone

from movements.services import movement_create
from qtg.core.actors import Actor
from qtg.core.venues import provide_venues
from standins.local import cex as local
from tests.movements.drive import node
from tests.venues.cex.conftest import create, drive, story
from venues.cex import ratelimit
from venues.cex.client import _moved
from venues.cex.models import CexRateBucket

pytestmark = [pytest.mark.standin, pytest.mark.django_db]


def attempt(creator, **fields):
    values = {
        "template": "cex_to_cex",
        "asset": "USDT",
        "amount": "25",
        "source": "binance-sender",
        "destination": "upbit-receiver",
        "actor": Actor.for_user(creator),
    }
    values.update(fields)
    try:
        request = movement_create(**values)
    except Exception as exc:
        return str(exc)
    return request.failure_reason if request.request_state == "FAILED" else ""


def test_a_movement_the_exchanges_could_never_carry_out_is_refused_at_create(exchange, creator):
    assert attempt(creator) == ""
    assert "no network 'dogechain'" in attempt(creator, params={"network": "dogechain"})
    assert "neither a chain address nor a configured exchange account" in attempt(
        creator, destination="sandbox-exchange-b"
    )
    assert "no exchange account 'sandbox-exchange-a'" in attempt(
        creator, source="sandbox-exchange-a"
    )


def test_the_budget_is_one_for_every_worker_and_a_block_stops_everyone():
    budget = ratelimit.Budget(per_second=1.0, burst=2.0)

    assert ratelimit.take("binance:test", budget) == 0.0
    assert ratelimit.take("binance:test", budget) == 0.0
    assert ratelimit.take("binance:test", budget) > 0.5  # the burst is spent

    ratelimit.block("binance:test", budget, seconds=30, reason="rate limited by binance")
    assert 29 < ratelimit.take("binance:test", budget) <= 30
    assert 29 < ratelimit.blocked_for("binance:test") <= 30
    # A shorter wait told later never shortens the block.
    ratelimit.block("binance:test", budget, seconds=5, reason="rate limited by binance")
    bucket = CexRateBucket.objects.get(credential="binance:test")
    assert bucket.blocked_until > timezone.now() + timedelta(seconds=29)


@pytest.fixture
def make_run_exchange(tmp_path):
    """The local exchange as ``QTG_VENUES=local make run`` starts it; (env, var_dir)."""
    env: dict[str, str] = {}
    [process] = local.start(env, tmp_path)
    yield env, tmp_path
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
    if process.stdout:
        process.stdout.close()


def test_make_run_starts_the_local_exchange_with_funded_demo_accounts(make_run_exchange):
    env, var_dir = make_run_exchange
    config = yaml.safe_load((var_dir / "exchanges.yaml").read_text())
    assert env["QTG_EXCHANGES_CONFIG"] == str(var_dir / "exchanges.yaml")
    accounts = {
        name: (entry["kind"], entry["api_url"], spec)
        for entry in config["exchanges"].values()
        for name, spec in entry["accounts"].items()
    }
    assert set(accounts) == set(local.DEMO_ACCOUNTS)
    for name, (kind, api_url, spec) in accounts.items():
        # The configuration names the secrets; the environment holds them.
        assert set(spec["secret"]) == {"env"}
        secret = env[spec["secret"]["env"]]
        assert secret not in (var_dir / "exchanges.yaml").read_text()
        client = getattr(ccxt, kind)(
            {
                "apiKey": env[spec["api_key"]["env"]],
                "secret": secret,
                "urls": {"api": _moved(getattr(ccxt, kind)().urls["api"], api_url)},
            }
        )
        assert client.fetch_balance()["USDC"]["free"] == 1_000_000, name
    assert oct(os.stat(var_dir / "local-exchange-accounts.yaml").st_mode & 0o777) == "0o600"


@pytest.mark.parametrize(
    "source,destination,asset,amount,arrived",
    [
        # seed_demo's local-cex-1: Binance keeps its 1 USDC fee out of what it sends.
        ("sandbox-exchange-a", "sandbox-exchange-b", "USDC", "2500.00", "2499"),
        # seed_demo's local-cex-2: Upbit charges its fee on top.
        ("sandbox-exchange-b", "sandbox-exchange-d", "USDT", "250", "250"),
    ],
)
def test_the_demo_movements_complete_against_the_local_exchange_make_run_starts(
    make_run_exchange, creator, settings, monkeypatch, source, destination, asset, amount, arrived
):
    env, _ = make_run_exchange
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    settings.QTG_EXCHANGES_CONFIG = env["QTG_EXCHANGES_CONFIG"]
    settings.QTG_EXECUTOR_DEFAULT_PROVIDER = "venues"
    settings.QTG_OBSERVE_POLL_SECONDS = 0.2
    # make run's processes read the configuration at start, which names every account.
    provide_venues(list(local.DEMO_ACCOUNTS))
    request = create(creator, source=source, destination=destination, asset=asset, amount=amount)

    # Nobody plays the chain here but the local exchange's own courier (5 s).
    request = drive(request, timeout=60, deliver=False)

    assert request.request_state == "COMPLETED", story(request)
    assert node(request, "deposit_observe").result["deposit"]["amount"] == arrived

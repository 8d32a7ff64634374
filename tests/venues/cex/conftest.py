"""The exchange lane against the local exchange: a Binance and an Upbit account to withdraw
from, one of each to deposit to, configured the way an operator configures real ones (keys
named by env variables), with the real executors chosen (``QTG_VENUES=local``)."""

import time

import pytest
import yaml

from movements.models import MovementRequest
from movements.services import movement_approve, movement_create
from qtg.core.actors import Actor
from qtg.core.venues import provide_venues
from standins.exchange import LocalExchange
from tests.execution.conftest import run_workers_once
from venues.cex import clock, venue

# our venue name -> (stand-in venue, its account name there)
ACCOUNTS = {
    "binance-sender": ("binance", "sender"),
    "binance-receiver": ("binance", "receiver"),
    "upbit-sender": ("upbit", "sender"),
    "upbit-receiver": ("upbit", "receiver"),
    "bithumb-sender": ("bithumb", "sender"),
    "bithumb-receiver": ("bithumb", "receiver"),
}
# Bithumb's travel-rule fields, sent with every withdrawal from a Bithumb account.
TRAVEL_RULE = {"exchange_name": "test", "receiver_type": "personal", "receiver_en_name": "QTG"}
SECRETS = {
    name: (f"key-{name}-0123456789abcdef", f"secret-{name}-s3cr3t-fedcba9876543210")
    for name in ACCOUNTS
}
BALANCES = {"USDT": "1000", "USDC": "1000", "ETH": "10"}
# How long the local exchange's histories may lag, as configured for the accounts.
VISIBILITY_SECONDS = 6


def env_name(venue: str, what: str) -> str:
    return f"QTG_TEST_{venue.upper().replace('-', '_')}_{what}"


def standin_config() -> dict:
    config: dict = {}
    for name, (kind, account) in ACCOUNTS.items():
        key, secret = SECRETS[name]
        config.setdefault(kind, {"accounts": {}})["accounts"][account] = {
            "api_key": key,
            "secret": secret,
            "balances": dict(BALANCES),
        }
    return config


def exchanges_yaml(base_url: str, *, rate_limit: dict | None = None, timeout: float = 2) -> dict:
    exchanges: dict = {}
    for name, (kind, _) in ACCOUNTS.items():
        entry = exchanges.setdefault(
            f"test-{kind}",
            {
                "kind": kind,
                "api_url": f"{base_url}/{kind}",
                "timeout_seconds": timeout,
                "networks": {"ethereum": "ETH"},
                "accounts": {},
            },
        )
        if rate_limit:
            entry["rate_limit"] = rate_limit
        entry["accounts"][name] = {
            "api_key": {"env": env_name(name, "API_KEY")},
            "secret": {"env": env_name(name, "SECRET")},
            "visibility_seconds": VISIBILITY_SECONDS,
            **({"withdraw_params": TRAVEL_RULE} if kind == "bithumb" else {}),
        }
    return {"version": 1, "exchanges": exchanges}


def credential_env() -> dict[str, str]:
    env = {}
    for name in ACCOUNTS:
        key, secret = SECRETS[name]
        env[env_name(name, "API_KEY")] = key
        env[env_name(name, "SECRET")] = secret
    return env


@pytest.fixture(scope="module")
def local_exchange():
    with LocalExchange(standin_config()) as exchange:
        yield exchange


@pytest.fixture
def exchange(local_exchange, settings, monkeypatch, tmp_path):
    """A fresh local exchange, the exchanges configuration pointing at it, the credentials in
    the environment, the real executors chosen; polls and retries immediate."""
    local_exchange.reset()
    # What a process remembers of the exchange (its clock, its withdrawal rules) is measured
    # again against the fresh one.
    clock.forget()
    venue.forget_rules()
    path = tmp_path / "exchanges.yaml"
    path.write_text(yaml.safe_dump(exchanges_yaml(local_exchange.base_url)))
    settings.QTG_EXCHANGES_CONFIG = str(path)
    for name, value in credential_env().items():
        monkeypatch.setenv(name, value)
    settings.QTG_VENUES = "local"
    settings.QTG_EXECUTOR_DEFAULT_PROVIDER = "venues"
    settings.QTG_OBSERVE_POLL_SECONDS = 0
    settings.QTG_RETRY_BASE_SECONDS = 0.05
    settings.QTG_RETRY_MAX_SECONDS = 0.5
    provide_venues(list(ACCOUNTS))
    return local_exchange


def create(creator, source="binance-sender", destination="upbit-receiver", amount="25", **extra):
    request = movement_create(
        template=extra.pop("template", "cex_to_cex"),
        asset=extra.pop("asset", "USDT"),
        amount=amount,
        source=source,
        destination=destination,
        params=extra.pop("params", {}),
        actor=Actor.for_user(creator),
        **extra,
    )
    movement_approve(request=request, actor=Actor.system("tests-approver"))
    return request


SETTLED = {"COMPLETED", "FAILED", "MANUAL_INTERVENTION", "CANCELLED", "EXPIRED"}


def drive(
    request: MovementRequest,
    exchange: LocalExchange | None = None,
    *,
    until=SETTLED,
    timeout: float = 30.0,
    deliver: bool = True,
    during=None,
) -> MovementRequest:
    """Run the workers' sweeps (and, with ``deliver``, the chain between the exchanges) until
    the movement reaches a state in ``until`` (or ``until(request)`` holds)."""
    deadline = time.monotonic() + timeout
    while True:
        request.refresh_from_db()
        if until(request) if callable(until) else request.request_state in until:
            return request
        if time.monotonic() > deadline:
            states = dict(request.nodes.values_list("node_key", "node_state"))
            raise AssertionError(f"request stuck in {request.request_state}: {states}")
        done = run_workers_once()
        if deliver and exchange is not None:
            exchange.deliver(older_than=0)
        if during is not None:
            during()
        if not done:
            time.sleep(0.05)


def withdrawals(exchange: LocalExchange, kind: str, account: str) -> list[dict]:
    return [w for w in exchange.state(kind)["withdrawals"] if w["account"] == account]


def story(request: MovementRequest) -> str:
    """The movement's audit events, for an assertion's message."""
    from movements.models import MovementEvent

    lines = []
    first = None
    for event in MovementEvent.objects.filter(request=request).order_by("id"):
        first = first or event.created_at
        lines.append(
            f"+{(event.created_at - first).total_seconds():.1f}s "
            f"{event.node_key or '-'}: {event.old_state}->{event.new_state} {event.detail}"
        )
    return "\n".join(lines)

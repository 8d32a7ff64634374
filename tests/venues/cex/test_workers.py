"""Three real worker processes (and beat) share one exchange credential while the local
exchange rate-limits it hard: every worker honours the Retry-After one of them was told
(the shared bucket's ``blocked_until``), so the exchange never has reason to ban the key."""

import pytest
import yaml

from movements.models import MovementEvent, MovementRequest
from qtg.core.venues import provide_venues
from standins.exchange import LocalExchange
from tests.execution.conftest import Cluster, wait_for
from tests.venues.cex.conftest import (
    ACCOUNTS,
    create,
    credential_env,
    exchanges_yaml,
    standin_config,
    story,
)

pytestmark = [
    pytest.mark.standin,
    pytest.mark.slow,
    pytest.mark.postgres,
    pytest.mark.django_db(transaction=True),
]

# The exchange: at most 10 requests per 2 s per key (and per address for public calls); a key
# that sends more than 3 requests while told to wait is banned (418) for a minute.
EXCHANGE_LIMIT = {"limit": 10, "window_seconds": 2, "ban_after": 3, "ban_seconds": 60}
# Our budget is deliberately looser than the exchange's, so the exchange does say 429.
OUR_BUDGET = {"per_second": 20, "burst": 20}
MOVEMENTS = 12


@pytest.fixture(scope="module")
def storm(django_db_setup, django_db_blocker, tmp_path_factory):
    from django.conf import settings as django_settings

    if not django_settings.DB_IS_POSTGRES:
        pytest.skip("real worker processes need PostgreSQL")
    tmp = tmp_path_factory.mktemp("cex-storm")
    with LocalExchange(standin_config(), deliver_after=0.5) as exchange:
        config = tmp / "exchanges.yaml"
        config.write_text(yaml.safe_dump(exchanges_yaml(exchange.base_url, rate_limit=OUR_BUDGET)))
        cluster = Cluster(tmp, workers=3)
        cluster.env.update(credential_env())
        cluster.env.update(
            {
                "QTG_VENUES": "local",
                "QTG_EXCHANGES_CONFIG": str(config),
                # Long enough for a submit to wait out a Retry-After inside its lease.
                "QTG_LEASE_SECONDS": "30",
            }
        )
        cluster.start()
        try:
            yield exchange, cluster, config
        finally:
            cluster.stop()


def test_a_429_storm_with_three_workers_completes_without_a_ban(storm, creator, settings):
    exchange, _cluster, config = storm
    settings.QTG_EXCHANGES_CONFIG = str(config)
    settings.QTG_EXECUTOR_DEFAULT_PROVIDER = "venues"
    provide_venues(list(ACCOUNTS))
    exchange.configure("binance", rate_limit=EXCHANGE_LIMIT)

    requests = [create(creator, amount=str(20 + i)) for i in range(MOVEMENTS)]
    settled = {"COMPLETED", "FAILED", "MANUAL_INTERVENTION"}
    wait_for(
        lambda: not MovementRequest.objects.exclude(request_state__in=settled).exists(),
        timeout=240,
        interval=1,
        message="movements still running: "
        + str(list(MovementRequest.objects.values_list("request_state", flat=True))),
    )

    binance = exchange.state("binance")
    assert binance["served_429"] > 0, "the exchange never rate-limited: no storm happened"
    assert binance["served_418"] == 0, "a worker kept calling while told to wait"
    for request in requests:
        request.refresh_from_db()
        assert request.request_state == "COMPLETED", story(request)
    sent = [w for w in binance["withdrawals"] if w["account"] == "sender"]
    assert len(sent) == MOVEMENTS
    assert len({w["client_id"] for w in sent}) == MOVEMENTS
    workers = {
        e.actor_id.split(":")[2]
        for e in MovementEvent.objects.filter(actor_id__startswith="worker:")
    }
    assert len(workers) >= 2, "the work was shared by several worker processes"

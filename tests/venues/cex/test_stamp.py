"""A Binance withdrawal is signed with a timestamp and a recvWindow that ends at the fence's
deadline: nothing may stand between the stamp and the request leaving, and a request whose
stamp the exchange refused (-1021, refused before acting) goes again stamped afresh.

Seen in CI (a 429 storm, three workers): the withdrawal was stamped, then waited for its token
of our shared budget longer than its window, was refused with -1021, and the movement ended
FAILED although the money never moved and nothing stood in its way."""

import time
from decimal import Decimal

import pytest
import yaml

from movements.executors.base import AmbiguousError
from tests.venues.cex.conftest import exchanges_yaml, withdrawals
from venues.cex import config, venue
from venues.cex.client import client
from venues.cex.exchanges.base import Validity

pytestmark = pytest.mark.django_db(transaction=True)

WINDOW_MS = 800


def binance_sender(exchange, settings, tmp_path, rate_limit=None):
    """The Binance sender (with ``rate_limit`` as our budget) and the Upbit receiver's address
    (asked before, under the default budget)."""
    address = venue.deposit_address(config.account("upbit-receiver"), "USDT", "ETH")
    path = tmp_path / "stamp.yaml"
    path.write_text(yaml.safe_dump(exchanges_yaml(exchange.base_url, rate_limit=rate_limit)))
    settings.QTG_EXCHANGES_CONFIG = str(path)
    return config.account("binance-sender"), address


def withdraw(sender, address, client_id, fence):
    return venue.withdraw(
        sender,
        coin="USDT",
        amount=Decimal("25"),
        address=address,
        network_id="ETH",
        client_id=client_id,
        budget_seconds=8,
        fence=fence,
    )


def test_the_wait_for_a_budget_token_comes_before_the_stamp(exchange, settings, tmp_path):
    # One request per 2.5 s of our own budget: the withdrawal right after a request waits for
    # its token longer than its 0.8 s window.
    sender, receiver = binance_sender(
        exchange, settings, tmp_path, rate_limit={"per_second": 0.4, "burst": 1}
    )
    client(sender).fetch_time()  # spends the sender's only token
    stamps = []

    def fence(_exchange):
        stamps.append(time.time())
        return Validity(timestamp_ms=int(time.time() * 1000), window_ms=WINDOW_MS)

    answer, _waits = withdraw(sender, receiver, "qtg-stamp-after-wait", fence)

    assert answer.get("id"), answer
    [sent] = withdrawals(exchange, "binance", "sender")
    assert sent["client_id"] == "qtg-stamp-after-wait"
    assert len(stamps) == 1


def test_a_refused_stamp_is_sent_again_stamped_afresh(exchange, settings, tmp_path):
    sender, receiver = binance_sender(exchange, settings, tmp_path)
    stamps = []

    def fence(_exchange):
        # The first stamp is already 5 s old when it leaves (a paused process, a slow host).
        age_ms = 5000 if not stamps else 0
        stamps.append(age_ms)
        return Validity(timestamp_ms=int(time.time() * 1000) - age_ms, window_ms=WINDOW_MS)

    answer, _waits = withdraw(sender, receiver, "qtg-stamp-again", fence)

    assert answer.get("id"), answer
    assert stamps == [5000, 0]
    [sent] = withdrawals(exchange, "binance", "sender")
    assert sent["client_id"] == "qtg-stamp-again"


def test_a_stamp_refused_every_time_is_no_clear_answer_and_goes_no_further(
    exchange, settings, tmp_path
):
    sender, receiver = binance_sender(exchange, settings, tmp_path)
    stamps = []

    def fence(_exchange):
        stamps.append(1)
        return Validity(timestamp_ms=int(time.time() * 1000) - 5000, window_ms=WINDOW_MS)

    with pytest.raises(AmbiguousError, match="recvWindow"):
        withdraw(sender, receiver, "qtg-stamp-never", fence)

    assert len(stamps) == 1 + venue.MAX_RESTAMPS
    assert withdrawals(exchange, "binance", "sender") == []

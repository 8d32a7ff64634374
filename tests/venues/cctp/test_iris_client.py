"""The Iris client against the Iris stand-in: Circle's v2 answers become messages, and its
refusals become the executor error taxonomy (transient with the venue's Retry-After, or
deterministic)."""

from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import pytest

from movements.executors.base import DeterministicError, TransientError
from standins.anvil import free_port
from standins.cctp import messages_sent
from venues.cctp.iris import RATE_LIMIT_BLOCK_SECONDS, IrisClient, retry_after_seconds

from .conftest import DOMAIN_A, DOMAIN_B, IRIS_CONFIRMATIONS, USDC

pytestmark = [pytest.mark.devchain, pytest.mark.standin]


@pytest.fixture
def burned(cctp, chain_a, chain_b):
    a, _ = cctp
    alice = chain_a.accounts[1]
    a.mint_usdc(alice.address, 10 * USDC)
    receipt = a.deposit_for_burn(alice, 2 * USDC, DOMAIN_B, chain_b.accounts[2].address)
    return receipt["transactionHash"].to_0x_hex(), messages_sent(a.transmitter, receipt)[0]


def test_not_found_pending_complete(iris, burned, chain_a):
    tx_hash, raw = burned
    with IrisClient(iris.url) as client:
        assert client.messages(DOMAIN_A, "0x" + "cd" * 32) == []
        (pending,) = client.messages(DOMAIN_A, tx_hash)
        assert not pending.complete
        assert pending.as_detail() == {
            "iris_status": "pending_confirmations",
            "event_nonce": pending.event_nonce,
        }
        chain_a.mine(IRIS_CONFIRMATIONS)
        (done,) = client.messages(DOMAIN_A, tx_hash)
    assert done.complete
    assert done.message == raw
    assert len(done.attestation) == 65
    assert done.as_detail()["message"] == "0x" + raw.hex()


def test_5xx_is_transient_and_carries_retry_after(iris, burned):
    tx_hash, _ = burned
    iris.set_faults(status=503, retry_after=4)
    with IrisClient(iris.url) as client, pytest.raises(TransientError) as raised:
        client.messages(DOMAIN_A, tx_hash)
    assert raised.value.retry_after == 4
    assert raised.value.evidence["http_status"] == 503

    iris.set_faults(status=500)
    with IrisClient(iris.url) as client, pytest.raises(TransientError) as raised:
        client.messages(DOMAIN_A, tx_hash)
    assert raised.value.retry_after is None


def test_429_waits_the_venues_retry_after_or_circles_block(iris, burned):
    tx_hash, _ = burned
    iris.set_faults(rate_limit=True, retry_after=9)
    with IrisClient(iris.url) as client, pytest.raises(TransientError) as raised:
        client.messages(DOMAIN_A, tx_hash)
    assert raised.value.retry_after == 9

    iris.set_faults(rate_limit=True)
    with IrisClient(iris.url) as client, pytest.raises(TransientError) as raised:
        client.messages(DOMAIN_A, tx_hash)
    assert raised.value.retry_after == RATE_LIMIT_BLOCK_SECONDS


def test_a_bad_request_is_deterministic(iris):
    with IrisClient(iris.url) as client, pytest.raises(DeterministicError, match="400"):
        client.messages(DOMAIN_A, "not-a-hash")


def test_unreachable_and_slow_are_transient(iris, burned):
    tx_hash, _ = burned
    with IrisClient(f"http://127.0.0.1:{free_port()}") as client, pytest.raises(TransientError):
        client.messages(DOMAIN_A, tx_hash)
    iris.set_faults(delay=0.5, times=1)
    with IrisClient(iris.url, timeout=0.1) as client, pytest.raises(TransientError):
        client.messages(DOMAIN_A, tx_hash)


def test_retry_after_reads_seconds_and_http_dates():
    now = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
    assert retry_after_seconds("120") == 120
    later, earlier = now + timedelta(seconds=30), now - timedelta(seconds=30)
    assert retry_after_seconds(format_datetime(later, usegmt=True), now=now) == 30
    assert retry_after_seconds(format_datetime(earlier, usegmt=True), now=now) == 0
    assert retry_after_seconds("soon") is None
    assert retry_after_seconds(None) is None

"""An exchange secret is read from where the configuration names it and goes nowhere else: not
into a log line (at any level), an error, an audit event, a node's result or the journal."""

import json
import logging

import pytest

from movements.models import MovementAttention, MovementEvent, MovementRequestNode
from tests.venues.cex.conftest import SECRETS, create, drive, env_name
from venues.cex.config import account
from venues.cex.models import CexRateBucket, CexWithdrawal

pytestmark = [pytest.mark.standin, pytest.mark.django_db]


def everything_written() -> str:
    rows = [
        *MovementEvent.objects.values("detail"),
        *MovementRequestNode.objects.values("result", "last_error", "signed_payload"),
        *MovementAttention.objects.values("message", "evidence"),
        *CexWithdrawal.objects.values(),
        *CexRateBucket.objects.values(),
    ]
    return json.dumps(rows, default=str)


def test_secrets_never_reach_logs_errors_or_evidence(exchange, creator, caplog, monkeypatch):
    caplog.set_level(logging.DEBUG)
    # A completed movement, one recovered after a timeout, one refused by the exchange, and
    # one signed with a wrong secret: every path that writes evidence or logs.
    drive(create(creator), exchange)
    exchange.add_fault(
        "upbit", "timeout_after_accept", endpoint="withdraw", times=1, hold_seconds=3
    )
    drive(create(creator, source="upbit-sender", destination="binance-receiver"), exchange)
    exchange.set_whitelist("binance", ["0x" + "ab" * 20], account="sender")
    refused = drive(create(creator), exchange)
    assert refused.request_state == "FAILED"
    monkeypatch.setenv(env_name("upbit-sender", "SECRET"), "wrong-" + SECRETS["upbit-sender"][1])
    drive(create(creator, source="upbit-sender", destination="binance-receiver"), exchange)

    written = everything_written()
    logged = "\n".join(f"{r.getMessage()} {r.exc_text or ''} {r.args!r}" for r in caplog.records)
    assert caplog.records, "the run logged nothing: the check below would prove nothing"
    for name, (key, secret) in SECRETS.items():
        assert secret not in written, name
        assert secret not in logged, name
        assert key not in logged, name
        assert secret not in repr(account(name)) and secret not in repr(account(name).credentials())

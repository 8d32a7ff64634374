"""The local exchange speaks Bithumb's API 2.0 well enough for ccxt: every test drives it with
`ccxt.bithumb` (its JWT with timestamp and a SHA-512 hash of the URL-encoded query), pointed
at the stand-in by its URLs."""

import base64
import hashlib
import hmac
import json
import time
import uuid

import ccxt
import pytest
import requests

from standins.exchange import LocalExchange

pytestmark = pytest.mark.standin

ADDRESS = "0x" + "ab" * 20
TRAVEL = {"exchange_name": "upbit", "receiver_type": "personal"}


@pytest.fixture(scope="module")
def local():
    config = {"bithumb": {"accounts": {"main": {"balances": {"USDT": "100"}}}}}
    with LocalExchange(config) as exchange:
        yield exchange


@pytest.fixture
def bithumb(local):
    local.reset()
    return ccxt.bithumb(local.ccxt_config("bithumb"))


def withdraw(bithumb, amount="10", **extra):
    return bithumb.privatePostV1WithdrawsCoin(
        {"currency": "USDT", "net_type": "ETH", "amount": amount, "address": ADDRESS, **extra}
    )


def test_a_signed_withdrawal_is_recorded_with_the_fee_on_top_and_read_back(bithumb, local):
    answer = withdraw(bithumb, **TRAVEL)

    assert answer["state"] == "processing"
    [row] = bithumb.privateGetV1Withdraws({"currency": "USDT"})
    assert (row["uuid"], row["amount"], row["net_type"]) == (answer["uuid"], "10", "ETH")
    assert bithumb.privateGetV1Withdraw({"uuid": answer["uuid"]})["uuid"] == answer["uuid"]
    [account] = [a for a in bithumb.privateGetV1Accounts() if a["currency"] == "USDT"]
    assert account["balance"] == "89"  # 10 sent, 1 fee on top
    local.settle_withdrawal("bithumb", id=answer["uuid"], status="completed")
    assert bithumb.privateGetV1Withdraw({"uuid": answer["uuid"]})["state"] == "done"


def test_a_withdrawal_without_the_travel_rule_fields_is_refused(bithumb, local):
    with pytest.raises(ccxt.BaseError, match="exchange_name"):
        withdraw(bithumb)
    assert local.state("bithumb")["withdrawals"] == []


def test_a_wrong_secret_or_a_token_without_timestamp_is_refused(local):
    wrong = ccxt.bithumb(local.ccxt_config("bithumb", secret="not-the-secret-0123456789"))
    with pytest.raises(ccxt.BaseError):
        wrong.privateGetV1Accounts()
    # Upbit's token (same shape, no timestamp) signed with the right key: Bithumb refuses it.
    upbit_style = ccxt.upbit(
        {
            **local.credentials("bithumb"),
            "urls": {
                "api": {
                    "public": f"{local.base_url}/bithumb",
                    "private": f"{local.base_url}/bithumb",
                }
            },
            "enableRateLimit": False,
        }
    )
    with pytest.raises(ccxt.BaseError, match="timestamp"):
        upbit_style.privateGetAccounts()


def _token(header: dict, payload: dict, secret: str, digest) -> str:
    def part(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

    signing = f"{part(json.dumps(header).encode())}.{part(json.dumps(payload).encode())}"
    signature = hmac.new(secret.encode(), signing.encode(), digest).digest()
    return f"{signing}.{part(signature)}"


@pytest.mark.parametrize(
    "alg,digest,status", [("HS256", hashlib.sha256, 200), ("HS512", hashlib.sha512, 401)]
)
def test_only_an_hs256_token_with_every_field_is_taken(local, alg, digest, status):
    credentials = local.credentials("bithumb")
    payload = {
        "access_key": credentials["apiKey"],
        "nonce": str(uuid.uuid4()),
        "timestamp": int(time.time() * 1000),
    }
    token = _token({"alg": alg, "typ": "JWT"}, payload, credentials["secret"], digest)

    answer = requests.get(
        f"{local.base_url}/bithumb/v1/accounts",
        headers={"Authorization": f"Bearer {token}"},
        timeout=10,
    )

    assert answer.status_code == status, answer.text


def test_deposits_chance_and_the_date_header_on_the_servers_clock(bithumb, local):
    local.credit_deposit(
        "bithumb", coin="USDT", network="ETH", amount="5", address=ADDRESS, txid="0xabc"
    )
    [deposit] = bithumb.privateGetV1Deposits({"currency": "USDT", "txids[]": "0xabc"})
    assert (deposit["state"], deposit["amount"]) == ("DEPOSIT_ACCEPTED", "5")
    chance = bithumb.privateGetV1WithdrawsChance({"currency": "USDT", "net_type": "ETH"})
    assert chance["withdraw_limit"]["fixed"] == 8
    assert chance["withdraw_limit"]["minimum"] == "2"

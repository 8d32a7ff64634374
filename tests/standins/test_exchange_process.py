"""`python -m standins.exchange` runs the local exchange as its own process (how `make run`
starts it), configured by an accounts file."""

import ccxt
import pytest

from standins.exchange import LocalExchange

pytestmark = [pytest.mark.standin, pytest.mark.slow]

ACCOUNTS_YAML = """
binance:
  accounts:
    treasury:
      api_key: local-binance-key
      secret: local-binance-secret
      balances: {USDT: "1234.5"}
upbit:
  accounts:
    treasury:
      api_key: local-upbit-key
      secret: local-upbit-secret
      balances: {ETH: "2"}
      whitelist: ["0xabababababababababababababababababababab"]
"""


def test_the_child_process_serves_both_venues_from_an_accounts_file(tmp_path):
    accounts = tmp_path / "accounts.yaml"
    accounts.write_text(ACCOUNTS_YAML)

    with LocalExchange(accounts, in_process=False) as exchange:
        binance = ccxt.binance(exchange.ccxt_config("binance", account="treasury"))
        upbit = ccxt.upbit(exchange.ccxt_config("upbit", account="treasury"))

        assert binance.fetch_balance()["USDT"]["free"] == 1234.5
        assert upbit.fetch_balance()["ETH"]["free"] == 2
        assert exchange.credentials("upbit", "treasury")["apiKey"] == "local-upbit-key"
        process = exchange._process

    assert process.poll() is not None

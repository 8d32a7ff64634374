"""The reviewed EVM chain config: read exactly, refused when half-understood."""

from decimal import Decimal

import pytest
from django.core.exceptions import ImproperlyConfigured

from venues.evm.config import Asset, parse_chain

TOKEN = "0x5FbDB2315678afecb367f032d93F642f64180aa3"
ACCOUNT = "0x70997970C51812dc3A010C7d01b50e0d17dc79C8"


def entry(**overrides):
    return {
        "kind": "evm",
        "chain_id": 1,
        "rpc_url_env": "QTG_X_RPC",
        "confirmations": 12,
        "block_seconds": 12,
        "replace_after_seconds": 180,
        "max_fee_gwei": "300.5",
        "tokens": {"USDC": {"address": TOKEN.lower(), "decimals": 6}},
        "accounts": {"treasury": {"address": ACCOUNT, "key": {"env": "K"}}},
        **overrides,
    }


def test_a_chain_entry_is_read_with_exact_fees_and_checksummed_addresses():
    chain = parse_chain("ethereum", entry())

    assert chain.max_fee_wei == 300_500_000_000
    assert chain.priority_fee_wei == 10**9
    assert chain.fee_bump_percent == Decimal("12.5")
    assert chain.asset("USDC").address == TOKEN
    assert chain.asset("ETH") == Asset("ETH", 18)
    assert chain.address_of("treasury") == ACCOUNT
    assert chain.address_of(ACCOUNT.lower()) == ACCOUNT


@pytest.mark.parametrize(
    ("amount", "units"),
    [("1", 10**6), ("0.000001", 1), ("123456.654321", 123456654321), ("1.10", 1_100_000)],
)
def test_amounts_convert_exactly_with_the_token_decimals(amount, units):
    usdc = parse_chain("ethereum", entry()).asset("USDC")

    assert usdc.to_base_units(Decimal(amount)) == units
    assert usdc.from_base_units(units) == Decimal(amount)


def test_an_amount_finer_than_the_token_is_refused():
    usdc = parse_chain("ethereum", entry()).asset("USDC")

    with pytest.raises(ValueError, match="more decimals than the token's 6"):
        usdc.to_base_units(Decimal("0.0000001"))


@pytest.mark.parametrize(
    ("overrides", "problem"),
    [
        ({"rpc_url_env": ""}, "rpc_url_env"),
        ({"confirmations": 0}, "confirmations"),
        ({"fee_bump_percent": 5}, "at least 10"),
        ({"max_fee_gwei": "lots"}, "max_fee_gwei"),
        ({"tokens": {"USDC": {"address": "0x12", "decimals": 6}}}, "not an address"),
        ({"accounts": {"treasury": {"key": {"env": "K"}}}}, "needs an 'address'"),
    ],
)
def test_a_malformed_entry_is_refused_naming_the_problem(overrides, problem):
    with pytest.raises(ImproperlyConfigured, match=problem):
        parse_chain("ethereum", entry(**overrides))


def test_a_fee_bump_raises_by_the_rule_rounding_up():
    chain = parse_chain("ethereum", entry(fee_bump_percent=10))

    assert chain.bumped(1000) == 1100
    assert chain.bumped(1001) == 1102

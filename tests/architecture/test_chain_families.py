"""Chain families are a registry (issue 27 item 3): the kernel spells no family's addresses;
each adapter registers its own, and venue names and the address book compare through it."""

import re
from pathlib import Path

from qtg.core import chains
from qtg.core.venues import canonical_venue, is_chain_address

ROOT = Path(__file__).resolve().parents[2]
EVM = "0x52908400098527886E0F7030069857D2E4169EE7"
SOLANA = "9xQeWvG816bUx9EPjHmaT23yvVM2ZWbrrpZb9PusVFin"


def test_the_kernel_knows_no_chain_family():
    spelled = re.compile(r"0x\[0-9a-fA-F\]|base58|\[1-9A-HJ-NP-Za-km-z\]", re.IGNORECASE)
    offending = [
        str(path.relative_to(ROOT))
        for path in (ROOT / "qtg" / "core").rglob("*.py")
        if spelled.search(path.read_text())
    ]
    assert offending == []


def test_the_adapters_register_their_families():
    registered = chains.families()
    assert {"evm", "solana"} <= set(registered)
    assert registered["evm"].finality == ("tag", "depth", "tag+depth")
    assert registered["solana"].finality == ("processed", "confirmed", "finalized")
    assert "nonce" in registered["evm"].tx_fields


def test_addresses_are_compared_in_their_familys_spelling():
    assert chains.family_of_address(EVM).name == "evm"
    assert chains.family_of_address(SOLANA).name == "solana"
    assert canonical_venue(f" {EVM} ") == EVM.lower()
    assert canonical_venue(SOLANA) == SOLANA  # base58 is case-sensitive
    assert chains.format_address(EVM.lower()) == EVM  # shown with its EIP-55 checksum
    assert chains.address_problem(EVM[:-1] + "e") is not None  # a wrong checksum
    assert is_chain_address(EVM) and is_chain_address(SOLANA)
    assert not is_chain_address("binance-main")


def test_a_new_family_needs_no_kernel_change():
    family = chains.ChainFamily(
        name="testcoin", address=re.compile(r"^tc1[a-z0-9]{10}$"), normalise=str.lower
    )
    chains.register_family(family)
    try:
        assert is_chain_address("tc1abcdefghij")
        assert chains.family_of_address("tc1abcdefghij") is family
    finally:
        chains._families.pop("testcoin")


def test_the_shared_chain_transaction_table_holds_no_familys_own_fields():
    """EVM's gas and fee fields, Solana's blockhash: each family's own fields are its detail
    (``family_detail``, checked against its schema), never a column of the shared table; the
    shared columns a family fills are the table's."""
    from venues.models import ChainTransaction

    columns = {field.name for field in ChainTransaction._meta.fields}
    for family in chains.families().values():
        own = {field.name for field in family.tx_detail}
        assert own, f"{family.name} registers no chain-transaction fields of its own"
        assert not own & columns, family.name
        assert set(family.tx_fields) <= columns, family.name
    assert not {"gas_limit", "max_fee_per_gas", "max_priority_fee_per_gas"} & columns

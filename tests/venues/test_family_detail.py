"""Chain families own their chain-transaction fields (issue 27 item 3): the shared table holds
a family's detail checked against its schema, the migration that moved EVM's columns there
carries every row across and back, and the reviewed chains config is parsed once."""

import os
from decimal import Decimal

import pytest
import yaml
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from qtg.core.actors import Actor
from qtg.core.chains import families
from venues import conf
from venues.evm import config as evm_config
from venues.evm.family import evm_fees
from venues.models import ChainTransaction, ChainTransactionEvent
from venues.transactions import chain_transaction_create

ACTOR = Actor.system("tests")
SENDER = "0x" + "ab" * 20
WEI = 2**70 + 12345  # beyond every JSON number type's exact range


def create(**kwargs):
    return chain_transaction_create(
        chain="devchain", sender=SENDER, nonce=3, unsigned={}, actor=ACTOR, **kwargs
    )


@pytest.mark.django_db
def test_an_evm_transactions_fees_are_its_familys_detail_exact_to_the_wei():
    tx = create(
        family="evm",
        detail={"gas_limit": 21_000, "max_fee_per_gas": WEI, "max_priority_fee_per_gas": 10**9},
    )
    tx = ChainTransaction.objects.get(pk=tx.pk)
    assert tx.family == "evm"
    assert tx.family_detail == {
        "gas_limit": "21000",
        "max_fee_per_gas": str(WEI),
        "max_priority_fee_per_gas": "1000000000",
    }
    assert evm_fees(tx) == {
        "gas_limit": 21_000,
        "max_fee_per_gas": WEI,
        "max_priority_fee_per_gas": 10**9,
    }


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("family", "detail", "problem"),
    [
        ("evm", {"gas_price": 1}, "no field gas_price"),
        ("evm", {"max_fee_per_gas": -1}, "whole number"),
        ("evm", {"max_fee_per_gas": Decimal("1.5")}, "whole number"),
        ("evm", {"gas_limit": True}, "whole number"),
        ("solana", {"max_fee_per_gas": 1}, "no field max_fee_per_gas"),
    ],
)
def test_a_detail_outside_the_familys_schema_is_refused_and_nothing_is_written(
    family, detail, problem
):
    with pytest.raises(ValueError, match=problem):
        create(family=family, detail=detail)
    assert not ChainTransaction.objects.exists()
    assert not ChainTransactionEvent.objects.exists()


@pytest.mark.django_db
def test_a_transaction_of_no_registered_family_is_refused():
    with pytest.raises(LookupError, match="no chain family 'bitcoin'"):
        create(family="bitcoin")
    assert not ChainTransaction.objects.exists()


def test_every_family_registers_what_the_console_and_the_config_ask_of_it():
    for family in families().values():
        assert family.parse_chain, family.name
        assert family.native[0] and family.native[1] > 0, family.name
        assert family.finality, family.name
        assert family.format_fee(10**9, "") != str(10**9), family.name
    assert families()["evm"].format_fee(441_000 * 10**9, "ETH") == "0.000441 ETH (441,000 gwei)"
    assert families()["solana"].format_fee(5000, "SOL") == "0.000005 SOL (5,000 lamports)"


MIGRATION_BEFORE = [("venues", "0007_ledger_chain")]
MIGRATION_AFTER = [("venues", "0008_chain_transaction_family_detail")]


@pytest.mark.django_db(transaction=True)
def test_the_migration_carries_every_row_to_its_familys_detail_and_back():
    executor = MigrationExecutor(connection)
    executor.migrate(MIGRATION_BEFORE)
    old = executor.loader.project_state(MIGRATION_BEFORE).apps.get_model(
        "venues", "ChainTransaction"
    )
    evm = old.objects.create(
        chain="ethereum",
        sender=SENDER,
        nonce=7,
        gas_limit=65_000,
        max_fee_per_gas=Decimal(WEI),
        max_priority_fee_per_gas=Decimal(1_500_000_000),
    )
    filler = old.objects.create(chain="ethereum", sender=SENDER, nonce=8, gas_limit=21_000)
    # What the old column holds (SQLite keeps ~15 significant digits of a decimal column; the
    # detail keeps what it is given exactly, see the first test): carried as held.
    held = int(old.objects.get(pk=evm.pk).max_fee_per_gas)
    solana = old.objects.create(
        chain="solana",
        sender="9xQeWvG816bUx9EPjHmaT23yvVM2ZWbrrpZb9PusVFin",
        unsigned={
            "blockhash": "EkSnNWid2cvwEVnVx9aBqawnmiCNiDgp3gUdkDPTKN1N",
            "to": "x",
            "last_valid_block_height": 312,
        },
    )

    executor = MigrationExecutor(connection)
    executor.migrate(MIGRATION_AFTER)
    new = executor.loader.project_state(MIGRATION_AFTER).apps.get_model(
        "venues", "ChainTransaction"
    )
    rows = {row.pk: row for row in new.objects.all()}
    assert (rows[evm.pk].family, rows[evm.pk].family_detail) == (
        "evm",
        {
            "gas_limit": "65000",
            "max_fee_per_gas": str(held),
            "max_priority_fee_per_gas": "1500000000",
        },
    )
    assert (rows[filler.pk].family, rows[filler.pk].family_detail) == (
        "evm",
        {"gas_limit": "21000"},
    )
    assert (rows[solana.pk].family, rows[solana.pk].family_detail) == (
        "solana",
        {
            "recent_blockhash": "EkSnNWid2cvwEVnVx9aBqawnmiCNiDgp3gUdkDPTKN1N",
            "last_valid_block_height": "312",
        },
    )

    executor = MigrationExecutor(connection)
    executor.migrate(MIGRATION_BEFORE)
    back = executor.loader.project_state(MIGRATION_BEFORE).apps.get_model(
        "venues", "ChainTransaction"
    )
    rows = {row.pk: row for row in back.objects.all()}
    assert (
        rows[evm.pk].gas_limit,
        rows[evm.pk].max_fee_per_gas,
        rows[evm.pk].max_priority_fee_per_gas,
    ) == (65_000, Decimal(held), Decimal(1_500_000_000))
    assert (rows[filler.pk].gas_limit, rows[filler.pk].max_fee_per_gas) == (21_000, None)
    assert rows[solana.pk].gas_limit is None

    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())


def test_the_chains_config_is_parsed_once_per_version_of_the_file(tmp_path, settings, monkeypatch):
    entry = {
        "kind": "evm",
        "chain_id": 1,
        "rpc_url_env": "QTG_TEST_RPC",
        "block_seconds": 12,
        "replace_after_seconds": 180,
        "max_fee_gwei": 300,
    }
    path = tmp_path / "chains.yaml"
    path.write_text(yaml.safe_dump({"version": 1, "chains": {"one": entry, "two": entry}}))
    settings.QTG_CHAINS_CONFIG = str(path)
    parses = []
    real = evm_config.parse_chain
    monkeypatch.setattr(
        evm_config, "parse_chain", lambda name, e: parses.append(name) or real(name, e)
    )

    for _ in range(5):
        assert evm_config.evm_chain("one").chain_id == 1
        assert set(evm_config.evm_chains()) == {"one", "two"}
        assert conf.chain("two").name == "two"
    assert sorted(parses) == ["one", "two"]

    entry["chain_id"] = 5
    path.write_text(yaml.safe_dump({"version": 1, "chains": {"one": entry}}))
    os.utime(path, (1, 1))  # a new version of the file, whatever the clock's resolution
    assert evm_config.evm_chain("one").chain_id == 5
    assert sorted(parses) == ["one", "one", "two"]

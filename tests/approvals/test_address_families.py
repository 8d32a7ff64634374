"""The address book compares addresses per family and takes the network a template sends to
the destination on, whatever that template's parameter is called."""

from datetime import timedelta

import pytest

from movements.compiler import bind_params, load_template_file
from movements.models import MovementRequest
from movements.services.address_book import (
    DESTINATION_NETWORK,
    Standing,
    address_approve,
    address_propose,
    network_of,
    standing_of,
)
from qtg.core.errors import InvalidInput
from tests.approvals.conftest import act

pytestmark = pytest.mark.django_db

SOLANA_VETTED = "6hmMyQ9GnX8mJ3q9X5Z6fJ4h8bQ7pR2sT3uV4wX5yZ6a"
SOLANA_OTHER_CASE = "6HmMyQ9GnX8mJ3q9X5Z6fJ4h8bQ7pR2sT3uV4wX5yZ6a"
EVM_CHECKSUMMED = "0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed"


@pytest.fixture(autouse=True)
def enforced(settings):
    settings.QTG_ADDRESS_BOOK_ENFORCED = True
    settings.QTG_ADDRESS_COOLDOWN = timedelta(0)


@pytest.fixture
def vet(alice, carol):
    def _vet(address: str, network: str, asset: str = "USDC"):
        entry = address_propose(
            actor=act(alice), asset=asset, network=network, address=address, label="vetted"
        )
        return address_approve(entry=entry, actor=act(carol))

    return _vet


def movement(template_key: str, destination: str, **params) -> MovementRequest:
    return MovementRequest(
        template_key=template_key, asset="USDC", destination=destination, params=params
    )


def test_a_base58_address_differing_only_in_case_is_another_key_and_is_refused(vet):
    vet(SOLANA_VETTED, "solana-devnet")

    standing, _ = standing_of(movement("sol_transfer", SOLANA_OTHER_CASE, chain="solana-devnet"))

    assert standing == Standing.NOT_ALLOWLISTED
    vetted = movement("sol_transfer", SOLANA_VETTED, chain="solana-devnet")
    assert standing_of(vetted)[0] == Standing.ALLOWED


def test_an_evm_address_matches_in_any_case(vet):
    vet(EVM_CHECKSUMMED, "ethereum")

    lower = movement("evm_transfer", EVM_CHECKSUMMED.lower(), chain="ethereum")

    assert standing_of(lower)[0] == Standing.ALLOWED


def test_a_mixed_case_evm_address_with_a_wrong_checksum_is_not_proposed(alice):
    typo = EVM_CHECKSUMMED[:-1] + "D"

    with pytest.raises(InvalidInput) as refused:
        address_propose(actor=act(alice), asset="USDC", network="ethereum", address=typo, label="x")

    assert "EIP-55" in refused.value.details["address"][0]


@pytest.mark.parametrize(
    ("template_key", "destination"),
    [("evm_transfer", EVM_CHECKSUMMED), ("sol_transfer", SOLANA_VETTED)],
)
def test_a_chain_transfer_is_vetted_on_its_chain_only(vet, template_key, destination):
    # given the address vetted on one chain only
    vet(destination, "ethereum" if template_key == "evm_transfer" else "solana-devnet")
    vetted_chain = "ethereum" if template_key == "evm_transfer" else "solana-devnet"

    # then a transfer on another chain is refused, on its chain allowed
    other = movement(template_key, destination, chain="polygon")
    assert standing_of(other)[0] == Standing.NOT_ALLOWLISTED
    assert standing_of(movement(template_key, destination, chain=vetted_chain))[0] == (
        Standing.ALLOWED
    )


def test_a_network_blank_entry_does_not_admit_a_transfer_on_any_chain(vet):
    vet(EVM_CHECKSUMMED, "")

    on_polygon = movement("evm_transfer", EVM_CHECKSUMMED, chain="polygon")

    assert standing_of(on_polygon)[0] == Standing.NOT_ALLOWLISTED


def test_a_template_without_a_network_function_is_refused(vet):
    vet("sandbox-exchange-b", "")

    standing, _ = standing_of(movement("someone_elses_template", "sandbox-exchange-b"))

    assert standing == Standing.NOT_ALLOWLISTED


def shipped_templates(settings):
    return [
        load_template_file(p)[0] for p in sorted(settings.QTG_ROUTE_TEMPLATE_DIR.glob("*.yaml"))
    ]


def test_every_shipped_template_has_a_network_function(settings):
    keys = {template["key"] for template in shipped_templates(settings)}

    assert keys <= set(DESTINATION_NETWORK), keys - set(DESTINATION_NETWORK)


# The parameter each shipped template sends to the destination on (read from its YAML: the
# node whose config has `to: ${destination}` and names the chain or network it sends on).
EXPECTED_PARAM = {
    "cex_to_cex": "network",
    "cex_to_cex_gated": "network",
    "split_withdraw": "network",
    "split_join": "network",
    "evm_transfer": "chain",
    "sol_transfer": "chain",
    "cctp": "destination_chain",
    "cctp_v2": "destination_chain",
    "cctp_v2_fast": "destination_chain",
}


def test_each_template_s_network_is_the_parameter_it_sends_to_the_destination_on(settings):
    for template in shipped_templates(settings):
        # every declared string param gets its own value, so the function's pick is visible
        given = {name: f"value-of-{name}" for name, decl in template["params"].items()}
        bound = bind_params(template, given)
        sending = [
            n["config"]
            for n in template["nodes"]
            if n["config"].get("to") == "${destination}" and n["has_side_effect"]
        ]
        # the last side-effecting node that pays the destination says where it arrives
        placeholder = sending[-1].get("chain") or sending[-1].get("network")
        expected = f"value-of-{EXPECTED_PARAM[template['key']]}"
        assert placeholder == "${" + EXPECTED_PARAM[template["key"]] + "}", template["key"]
        assert network_of(template_key=template["key"], params=bound) == expected

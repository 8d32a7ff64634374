"""A chain transaction's console page in a real headless Chromium (issue 31): a CCTP burn as a
person reads it — the decoded call, amount and recipient, the fee in ETH and gwei, the depth
against the finality policy, the explorer link, one time format. Its screenshot
(``screen-chain-transaction.png``) goes where the browser tests put theirs; the committed copy
is docs/screenshots/screen-chain-transaction.png."""

import yaml
from django.contrib.auth.models import Permission
from eth_abi import encode as abi_encode

from qtg.core.actors import Actor
from tests.admin.conftest import staff_user
from tests.admin.test_browser import browser_page, log_in, pytestmark, screenshot  # noqa: F401
from venues.cctp.calls import DEPOSIT_FOR_BURN
from venues.cctp.message import address_to_bytes32
from venues.transactions import chain_transaction_create, chain_transaction_transition

SENDER = "0x70997970C51812dc3A010C7d01b50e0d17dc79C8"
BOB = "0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC"
USDC = "0xA0b86991c6218b36c1d19D4a2e9Eb0cE3606eB48"
MESSENGER = "0xBd3fa81B58Ba92a82136038B25aDec7066af3155"
ACTOR = Actor.system("venues.evm")


def chains_yaml(tmp_path) -> str:
    def chain(chain_id, domain, explorer):
        return {
            "kind": "evm",
            "chain_id": chain_id,
            "rpc_url_env": f"QTG_RPC_{chain_id}",
            "finality": {"tag": True, "depth": 12, "reason": "the tag and a margin"},
            "block_seconds": 12,
            "replace_after_seconds": 180,
            "max_fee_gwei": 300,
            "explorer_tx_url": explorer,
            "tokens": {"USDC": {"address": USDC, "decimals": 6}},
            "cctp": {
                "domain": domain,
                "token_messenger": MESSENGER,
                "message_transmitter": MESSENGER,
                "usdc": USDC,
            },
        }

    config = {
        "version": 1,
        "chains": {
            "ethereum": chain(1, 0, "https://etherscan.io/tx/{tx}"),
            "arbitrum": chain(42161, 3, "https://arbiscan.io/tx/{tx}"),
        },
    }
    path = tmp_path / "chains.yaml"
    path.write_text(yaml.safe_dump(config))
    return str(path)


def burn_transaction():
    """A CCTP V1 burn of 2,500.75 USDC for BOB on arbitrum, encoded as the burn executor
    encodes it, signed, mined and counted 5 deep."""
    data = DEPOSIT_FOR_BURN + abi_encode(
        ["uint256", "uint32", "bytes32", "address"],
        [2_500_750_000, 3, address_to_bytes32(BOB), USDC],
    )
    tx = chain_transaction_create(
        chain="ethereum",
        sender=SENDER,
        nonce=42,
        unsigned={"to": MESSENGER, "value": "0", "data": "0x" + data.hex(), "gas": "120000"},
        actor=ACTOR,
        family="evm",
        detail={
            "gas_limit": 120_000,
            "max_fee_per_gas": 31_500_000_000,
            "max_priority_fee_per_gas": 1_500_000_000,
        },
    )
    tx_hash = "0x" + "5e" * 32
    for state, fields in (
        ("SIGNED", {"tx_hash": tx_hash, "raw_signed": "0x02f8"}),
        ("BROADCAST", {}),
        (
            "CONFIRMED",
            {
                "block_number": 21_000_000,
                "block_hash": "0x" + "b1" * 32,
                "confirmations": 5,
                "fee_paid": 2_381_250_000_000_000,
            },
        ),
    ):
        tx = chain_transaction_transition(
            chain_transaction_id=tx.pk, to_state=state, actor=ACTOR, fields=fields
        )
    return tx


def test_a_person_reads_a_cctp_burn_on_its_chain_transaction_page(
    browser_page,  # noqa: F811 (the fixture of tests/admin/test_browser.py)
    live_server,
    settings,
    tmp_path,
):
    settings.QTG_CHAINS_CONFIG = chains_yaml(tmp_path)
    reader = staff_user("cara")
    reader.user_permissions.add(
        Permission.objects.get(content_type__app_label="venues", codename="view_chaintransaction")
    )
    tx = burn_transaction()
    page = browser_page
    from playwright.sync_api import expect  # (the module is skipped without playwright)

    log_in(page, live_server, "cara")
    page.goto(f"{live_server.url}/admin/venues/chaintransaction/{tx.pk}/change/")

    content = page.locator("#content")
    expect(content).to_contain_text(
        f"CCTP V1 burn of 2,500.75 USDC for {BOB} on domain 3 (arbitrum)"
    )
    expect(content).to_contain_text("0.00238125 ETH (2,381,250 gwei)")
    expect(content).to_contain_text("5 of 12 required (policy tag+depth")
    expect(content).to_contain_text("max fee per gas: 31.5 gwei")
    link = page.get_by_role("link", name="view on the explorer")
    expect(link).to_have_attribute("href", f"https://etherscan.io/tx/{tx.tx_hash}")
    expect(content).to_contain_text(f"{tx.created_at:%Y-%m-%d %H:%M:%S} UTC")
    screenshot(page, "screen-chain-transaction")

"""The local Solana node, driven only through solana-py and solders as an executor drives a real
node: blockhashes and their validity window, landing and commitment, SPL tokens, and the
faults (drop, hold until a slot, slow answers, blockhashes expired early)."""

import asyncio
import time

import pytest
from solana.exceptions import SolanaRpcException
from solana.rpc.async_api import AsyncClient
from solana.rpc.core import RPCException
from solana.rpc.jsonrpc import JsonRpcRequest
from solana.rpc.models import TxOpts
from solders.keypair import Keypair
from solders.message import Message
from solders.pubkey import Pubkey
from solders.system_program import TransferParams, transfer
from solders.transaction import Transaction
from solders.transaction_status import TransactionConfirmationStatus
from spl.token.constants import TOKEN_PROGRAM_ID
from spl.token.instructions import transfer_checked
from spl.token.models import TransferCheckedParams

from standins.solana import LocalSolana, Settings

pytestmark = pytest.mark.standin

SOL = 10**9
CONFIRMED = TransactionConfirmationStatus.Confirmed
FINALIZED = TransactionConfirmationStatus.Finalized
PROCESSED = TransactionConfirmationStatus.Processed
SETTINGS = Settings(slot_seconds=3600, confirmed_after=2, finalized_after=5, blockhash_validity=20)
SEND = TxOpts(preflight_commitment="processed")
SKIP_PREFLIGHT = TxOpts(skip_preflight=True)


@pytest.fixture(scope="module")
def node():
    """A node whose clock never ticks by itself: each test moves slots with advance()."""
    with LocalSolana(SETTINGS) as local:
        yield local


@pytest.fixture(autouse=True)
def _no_faults(request):
    yield
    if "node" in request.fixturenames:
        request.getfixturevalue("node").clear_faults()


def rpc(node, call):
    """Run one solana-py call (its client is async-only since 0.41) and return the result."""

    async def run():
        async with AsyncClient(node.url, commitment="processed") as client:
            return await call(client)

    return asyncio.run(run())


def blockhash_is_valid(node, blockhash, commitment="processed") -> bool:
    request = JsonRpcRequest(
        method="isBlockhashValid", params=[str(blockhash), {"commitment": commitment}]
    )
    return rpc(node, lambda c: c.send_rpc_request(request, dict))["value"]


def funded(node, lamports=2 * SOL) -> Keypair:
    keypair = Keypair()
    node.airdrop(keypair.pubkey(), lamports)
    return keypair


def sol_transfer(node, sender, recipient, lamports, commitment="processed"):
    """A signed SOL transfer on the latest blockhash; returns (tx, last valid block height)."""
    latest = rpc(node, lambda c: c.get_latest_blockhash(commitment)).value
    instruction = transfer(
        TransferParams(from_pubkey=sender.pubkey(), to_pubkey=recipient, lamports=lamports)
    )
    message = Message([instruction], sender.pubkey())
    return Transaction([sender], message, latest.blockhash), latest.last_valid_block_height


def send(node, tx, opts=SEND):
    return rpc(node, lambda c: c.send_raw_transaction(bytes(tx), opts)).value


def status(node, signature):
    return rpc(node, lambda c: c.get_signature_statuses([signature], True)).value[0]


def balance(node, pubkey) -> int:
    return rpc(node, lambda c: c.get_balance(pubkey)).value


def test_a_sent_transfer_lands_in_the_next_slot_and_moves_the_lamports(node):
    sender, recipient = funded(node), Keypair().pubkey()
    tx, _ = sol_transfer(node, sender, recipient, SOL // 2)

    signature = send(node, tx)

    assert signature == tx.signatures[0]
    assert status(node, signature) is None
    assert balance(node, recipient) == 0
    node.advance(1)
    assert status(node, signature).confirmation_status == PROCESSED
    assert balance(node, recipient) == SOL // 2


def test_a_landed_transaction_is_confirmed_then_finalized_after_the_configured_slots(node):
    sender = funded(node)
    tx, _ = sol_transfer(node, sender, Keypair().pubkey(), SOL // 4)
    signature = send(node, tx)
    node.advance(1)
    landed_at = status(node, signature).slot

    seen = []
    for _ in range(SETTINGS.finalized_after + 1):
        found = status(node, signature)
        seen.append((found.confirmation_status, found.confirmations))
        node.advance(1)

    assert seen == [
        (PROCESSED, 0),
        (PROCESSED, 1),
        (CONFIRMED, 2),
        (CONFIRMED, 3),
        (CONFIRMED, 4),
        (FINALIZED, None),
    ]
    assert status(node, signature).slot == landed_at


def test_get_transaction_answers_only_at_the_commitment_asked_and_never_below_confirmed(node):
    sender, recipient = funded(node), Keypair().pubkey()
    tx, _ = sol_transfer(node, sender, recipient, 1_234_567)
    signature = send(node, tx)
    node.advance(1)

    def fetch(commitment):
        return rpc(
            node,
            lambda c: c.get_transaction(signature, encoding="base64", commitment=commitment),
        ).value

    with pytest.raises(RPCException, match="below `confirmed`"):
        fetch("processed")
    assert fetch("confirmed") is None
    node.advance(SETTINGS.confirmed_after)
    confirmed = fetch("confirmed")
    assert fetch("finalized") is None
    node.advance(SETTINGS.finalized_after)
    finalized = fetch("finalized")

    assert confirmed.slot == finalized.slot == status(node, signature).slot
    meta = finalized.transaction.meta
    assert meta.err is None
    keys = finalized.transaction.transaction.message.account_keys
    index = keys.index(recipient)
    assert meta.post_balances[index] - meta.pre_balances[index] == 1_234_567


def test_latest_blockhash_at_each_commitment_comes_from_that_commitments_slot(node):
    node.advance(SETTINGS.finalized_after + 1)
    processed = rpc(node, lambda c: c.get_latest_blockhash("processed"))
    finalized = rpc(node, lambda c: c.get_latest_blockhash("finalized"))
    heights = {
        level: rpc(node, lambda c, level=level: c.get_block_height(level)).value
        for level in ("processed", "confirmed", "finalized")
    }

    assert processed.context.slot - finalized.context.slot == SETTINGS.finalized_after
    assert processed.value.blockhash != finalized.value.blockhash
    assert processed.value.last_valid_block_height == heights["processed"] + 20
    assert finalized.value.last_valid_block_height == heights["finalized"] + 20
    assert heights["processed"] - heights["confirmed"] == SETTINGS.confirmed_after


def test_a_blockhash_is_valid_until_the_block_height_passes_its_last_valid_height(node):
    sender = funded(node)
    tx, last_valid = sol_transfer(node, sender, Keypair().pubkey(), 1_000_000)
    blockhash = tx.message.recent_blockhash
    height = rpc(node, lambda c: c.get_block_height("processed")).value

    node.advance(last_valid - height)
    assert blockhash_is_valid(node, blockhash)
    node.advance(1)

    assert not blockhash_is_valid(node, blockhash)
    with pytest.raises(RPCException, match="Blockhash not found"):
        send(node, tx)


def test_a_dropped_transaction_is_acknowledged_never_lands_and_then_expires(node):
    sender, recipient = funded(node), Keypair().pubkey()
    tx, last_valid = sol_transfer(node, sender, recipient, SOL // 10)
    node.drop_next()

    signature = send(node, tx)
    node.advance(3)
    send(node, tx)  # re-sending the same bytes does not revive it
    node.advance(3)
    assert signature == tx.signatures[0]
    assert status(node, signature) is None

    node.expire_blockhashes()

    assert rpc(node, lambda c: c.get_block_height("finalized")).value > last_valid
    assert not blockhash_is_valid(node, tx.message.recent_blockhash, "finalized")
    with pytest.raises(RPCException, match="Blockhash not found"):
        send(node, tx)
    assert balance(node, recipient) == 0
    sends = node.state()["sends"][str(signature)]
    assert [send["outcome"] for send in sends] == ["dropped", "dropped"]


def test_a_transaction_sent_after_its_blockhash_expired_never_lands(node):
    sender, recipient = funded(node), Keypair().pubkey()
    tx, _ = sol_transfer(node, sender, recipient, SOL // 10)
    node.expire_blockhashes()

    send(node, tx, SKIP_PREFLIGHT)
    node.advance(2)

    assert status(node, tx.signatures[0]) is None
    assert balance(node, recipient) == 0


def test_a_held_transaction_lands_exactly_at_the_last_valid_height_and_not_after(node):
    sender = funded(node)
    on_time, last_valid = sol_transfer(node, sender, Keypair().pubkey(), 1_000_000)
    node.hold_next(until_slot=last_valid)
    send(node, on_time)
    late, late_last_valid = sol_transfer(node, sender, Keypair().pubkey(), 2_000_000)
    node.hold_next(until_slot=late_last_valid + 1)
    send(node, late)

    node.advance(late_last_valid + 2 - rpc(node, lambda c: c.get_slot("processed")).value)

    assert status(node, on_time.signatures[0]).slot == last_valid
    assert status(node, late.signatures[0]) is None


def test_resending_a_landed_transaction_is_refused_by_preflight_and_moves_nothing_again(node):
    sender, recipient = funded(node), Keypair().pubkey()
    tx, _ = sol_transfer(node, sender, recipient, 7_770_000)
    send(node, tx)
    node.advance(1)

    with pytest.raises(RPCException, match="already been processed"):
        send(node, tx)
    send(node, tx, SKIP_PREFLIGHT)
    node.advance(2)

    assert balance(node, recipient) == 7_770_000


def test_preflight_refuses_a_transfer_the_sender_cannot_pay_and_nothing_is_queued(node):
    sender = funded(node, lamports=SOL)
    tx, _ = sol_transfer(node, sender, Keypair().pubkey(), 5 * SOL)

    with pytest.raises(RPCException, match="simulation failed"):
        send(node, tx)

    assert str(tx.signatures[0]) not in node.state()["sends"]


def test_a_slow_answer_times_the_client_out_but_the_transaction_was_taken(node):
    sender, recipient = funded(node), Keypair().pubkey()
    tx, _ = sol_transfer(node, sender, recipient, 4_242_000)
    node.slow(1.5, method="sendTransaction", times=1)

    async def send_with_short_timeout():
        async with AsyncClient(node.url, timeout=0.3, max_transport_retries=0) as client:
            return await client.send_raw_transaction(bytes(tx), SEND)

    with pytest.raises(SolanaRpcException):
        asyncio.run(send_with_short_timeout())
    time.sleep(1.5)
    node.advance(1)

    assert status(node, tx.signatures[0]) is not None
    assert balance(node, recipient) == 4_242_000


def test_spl_tokens_with_six_decimals_move_between_associated_token_accounts(node):
    owner, recipient = funded(node), Keypair()
    mint = Pubkey.from_string(node.create_mint(decimals=6))
    source = Pubkey.from_string(node.mint_to(mint, owner.pubkey(), "25.5"))
    destination = Pubkey.from_string(node.create_token_account(mint, recipient.pubkey()))
    latest = rpc(node, lambda c: c.get_latest_blockhash("processed")).value
    instruction = transfer_checked(
        TransferCheckedParams(
            program_id=TOKEN_PROGRAM_ID,
            source=source,
            mint=mint,
            dest=destination,
            owner=owner.pubkey(),
            amount=1_250_000,
            decimals=6,
        )
    )
    tx = Transaction([owner], Message([instruction], owner.pubkey()), latest.blockhash)

    send(node, tx)
    node.advance(SETTINGS.confirmed_after + 1)

    received = rpc(node, lambda c: c.get_token_account_balance(destination)).value
    left = rpc(node, lambda c: c.get_token_account_balance(source)).value
    assert (received.amount, received.decimals, received.ui_amount_string) == ("1250000", 6, "1.25")
    assert left.ui_amount_string == "24.25"
    fetched = rpc(
        node,
        lambda c: c.get_transaction(tx.signatures[0], encoding="base64", commitment="confirmed"),
    ).value
    post = {
        b.account_index: b.ui_token_amount.amount
        for b in fetched.transaction.meta.post_token_balances
    }
    assert sorted(post.values()) == ["1250000", "24250000"]


def test_mint_to_refuses_more_decimals_than_the_mint_has(node):
    mint = node.create_mint(decimals=6)

    with pytest.raises(Exception, match="decimals"):
        node.mint_to(mint, Keypair().pubkey(), "1.0000001")


def test_the_clock_produces_slots_by_itself():
    with LocalSolana(Settings(slot_seconds=0.05)) as node:
        first = rpc(node, lambda c: c.get_slot("processed")).value
        time.sleep(0.5)
        later = rpc(node, lambda c: c.get_slot("processed")).value
        node.pause()
        paused_at = rpc(node, lambda c: c.get_slot("processed")).value
        time.sleep(0.3)
        still = rpc(node, lambda c: c.get_slot("processed")).value

    assert later - first >= 5
    assert still == paused_at


@pytest.mark.slow
def test_the_child_process_serves_the_same_protocol():
    with LocalSolana(Settings(slot_seconds=0.05), in_process=False) as node:
        sender, recipient = funded(node), Keypair().pubkey()
        tx, _ = sol_transfer(node, sender, recipient, 3_133_700)
        send(node, tx)
        deadline = time.monotonic() + 10
        while balance(node, recipient) == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        process = node._process
        assert balance(node, recipient) == 3_133_700

    assert process.poll() is not None


def test_account_info_rent_and_airdrop_answer_in_the_real_shapes(node):
    owner = Keypair()
    mint = Pubkey.from_string(node.create_mint(decimals=6))
    rent = rpc(node, lambda c: c.get_minimum_balance_for_rent_exemption(82)).value

    airdropped = rpc(node, lambda c: c.request_airdrop(owner.pubkey(), 3 * SOL)).value
    mint_info = rpc(node, lambda c: c.get_account_info(mint)).value
    missing = rpc(node, lambda c: c.get_account_info(Keypair().pubkey())).value

    assert airdropped is not None
    assert balance(node, owner.pubkey()) == 3 * SOL
    assert mint_info.owner == TOKEN_PROGRAM_ID
    assert len(mint_info.data) == 82 and mint_info.data[44] == 6
    assert mint_info.lamports == rent
    assert missing is None


def test_skipped_slots_make_the_block_height_lower_than_the_slot_and_validity_counts_blocks():
    settings = Settings(
        slot_seconds=3600,
        confirmed_after=1,
        finalized_after=2,
        blockhash_validity=5,
        skip_every=3,
        first_slot=100,
    )
    with LocalSolana(settings) as local:
        local.advance(12)
        state = local.state()
        # 12 slots from 100; 102, 105, 108, 111 are skipped (no block).
        assert state["slot"] == 112 and state["height"] == 8
        assert rpc(local, lambda c: c.get_block_height("processed")).value == 8
        assert rpc(local, lambda c: c.get_slot("processed")).value == 112
        value = rpc(local, lambda c: c.get_latest_blockhash("processed")).value
        # Valid for 5 more BLOCKS (heights), not slots.
        assert value.last_valid_block_height == 8 + 5


def test_a_lagging_status_view_misses_a_landing_with_its_context_slot_stuck(node):
    payer, recipient = Keypair(), Keypair()
    node.airdrop(payer.pubkey(), SOL)
    blockhash = rpc(node, lambda c: c.get_latest_blockhash("processed")).value.blockhash
    tx = Transaction.new_signed_with_payer(
        [
            transfer(
                TransferParams(
                    from_pubkey=payer.pubkey(), to_pubkey=recipient.pubkey(), lamports=SOL // 10
                )
            )
        ],
        payer.pubkey(),
        [payer],
        blockhash,
    )
    signature = rpc(node, lambda c: c.send_raw_transaction(bytes(tx), SEND)).value
    stuck_at = node.state()["slot"]
    node.lag_status(str(signature), 30)
    node.advance(3)

    answer = rpc(node, lambda c: c.get_signature_statuses([signature], True))

    assert str(signature) in node.state()["landed"]
    assert answer.value[0] is None
    assert answer.context.slot == stuck_at
    node.clear_faults()
    assert rpc(node, lambda c: c.get_signature_statuses([signature], True)).value[0] is not None

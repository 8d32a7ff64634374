"""SOL and SPL transfers through the sol_transfer template, the worker's services and the real
solana-py client, against the local node: what lands, how often, and when the movement says so."""

import pytest
from solders.keypair import Keypair
from solders.pubkey import Pubkey
from spl.token.instructions import get_associated_token_address

from movements.models import MovementAttention
from tests.execution.conftest import run_workers_once
from tests.venues.pages import chain_transaction_page
from venues.models import ChainTransaction

from .conftest import SETTINGS, TREASURY, drive, lamports

pytestmark = [pytest.mark.standin, pytest.mark.django_db(transaction=True)]

FEE = 5000  # lamports per signature on the node


def balance(node, pubkey) -> int:
    from tests.standins.test_solana_node import rpc

    return rpc(node, lambda c: c.get_balance(pubkey)).value


def token_units(node, owner: Pubkey, mint: str) -> int:
    from tests.standins.test_solana_node import rpc

    ata = get_associated_token_address(owner, Pubkey.from_string(mint))
    return int(rpc(node, lambda c: c.get_token_account_balance(ata)).value.amount)


def transfer(make_movement, *, asset: str, amount: str, to: Pubkey):
    return make_movement(
        "sol_transfer",
        approve=True,
        asset=asset,
        amount=amount,
        source=TREASURY,
        destination=str(to),
    )


def test_a_sol_transfer_lands_once_and_completes_at_finality(solana, make_movement):
    recipient = Keypair().pubkey()
    before = balance(solana.node, solana.treasury.pubkey())

    movement = drive(transfer(make_movement, asset="SOL", amount="1.25", to=recipient), solana.node)

    assert movement.request_state == "COMPLETED"
    assert balance(solana.node, recipient) == lamports("1.25")
    assert before - balance(solana.node, solana.treasury.pubkey()) == lamports("1.25") + FEE
    [record] = ChainTransaction.objects.filter(movement=movement)
    assert record.state == "FINALIZED"
    assert record.fee_paid == FEE
    assert movement.nodes.get(node_key="transfer").external_ref == record.tx_hash
    assert record.events.order_by("id").first().to_state == "CREATED"


def test_a_usdc_transfer_moves_exact_base_units_and_creates_the_recipients_token_account(
    solana, make_movement
):
    recipient = Keypair().pubkey()

    movement = drive(
        transfer(make_movement, asset="USDC", amount="12.345678", to=recipient), solana.node
    )

    assert movement.request_state == "COMPLETED"
    assert token_units(solana.node, recipient, solana.usdc_mint) == 12_345_678
    assert token_units(solana.node, solana.treasury.pubkey(), solana.usdc_mint) == 987_654_322


@pytest.mark.parametrize(("asset", "amount"), [("USDC", "1.0000001"), ("SOL", "0.0000000001")])
def test_an_amount_finer_than_the_token_is_refused_at_create(solana, make_movement, asset, amount):
    movement = make_movement(
        "sol_transfer",
        asset=asset,
        amount=amount,
        source=TREASURY,
        destination=str(Keypair().pubkey()),
    )

    assert movement.request_state == "FAILED"
    assert "decimals" in movement.failure_reason
    assert not ChainTransaction.objects.exists()


def test_a_destination_that_is_no_solana_address_is_refused_at_create(solana, make_movement):
    movement = make_movement(
        "sol_transfer", asset="SOL", amount="1", source=TREASURY, destination="0x" + "ab" * 20
    )

    assert movement.request_state == "FAILED"
    assert "Solana address" in movement.failure_reason


def test_a_dropped_transaction_expires_and_the_new_one_lands_exactly_once(solana, make_movement):
    recipient = Keypair().pubkey()
    solana.node.drop_next()
    movement = transfer(make_movement, asset="SOL", amount="2", to=recipient)
    for _ in range(8):  # signed, sent, re-sent: acknowledged each time, landed nowhere
        run_workers_once()
        solana.node.advance(1)
    first = ChainTransaction.objects.get(movement=movement)
    assert first.state == "BROADCAST"

    solana.node.expire_blockhashes()
    movement = drive(movement, solana.node)

    assert movement.request_state == "COMPLETED"
    assert balance(solana.node, recipient) == lamports("2")
    first.refresh_from_db()
    second = ChainTransaction.objects.exclude(pk=first.pk).get(movement=movement)
    assert (first.state, second.state) == ("EXPIRED", "FINALIZED")
    assert second.replaces_id == first.pk
    assert first.raw_signed != second.raw_signed
    assert movement.nodes.get(node_key="transfer").external_ref == second.tx_hash
    sends = solana.node.state()["sends"]
    assert {send["outcome"] for send in sends[first.tx_hash]} == {"dropped"}
    expired = first.events.get(to_state="EXPIRED").evidence
    assert expired["final_height"] > expired["last_valid_block_height"]
    assert expired["blockhash_valid"] is False


def test_a_transaction_landing_at_its_last_valid_height_is_never_replaced(solana, make_movement):
    recipient = Keypair().pubkey()
    state = solana.node.state()
    # The executor dates its transaction with the confirmed blockhash: it is valid up to that
    # block's height + the validity window (a block HEIGHT: skipped slots make it lower than
    # the slot). Hold the transaction until the slot whose block is exactly at that height.
    last_valid = state["heights"]["confirmed"] + 30
    slot, height, every = state["slot"], state["height"], SETTINGS.skip_every
    while height < last_valid:
        slot += 1
        height += 0 if slot % every == 0 else 1
    assert slot > last_valid  # the slot and the height differ
    solana.node.hold_next(until_slot=slot)

    movement = drive(transfer(make_movement, asset="SOL", amount="0.75", to=recipient), solana.node)

    assert movement.request_state == "COMPLETED"
    [record] = ChainTransaction.objects.filter(movement=movement)
    assert record.unsigned["last_valid_block_height"] == last_valid
    assert record.block_number == slot  # Solana's block_number is the slot it landed in
    assert record.state == "FINALIZED"
    assert balance(solana.node, recipient) == lamports("0.75")
    outcomes = [send["outcome"] for send in solana.node.state()["sends"][record.tx_hash]]
    assert outcomes[0] == "held" and set(outcomes[1:]) <= {"duplicate"}


def test_the_nodes_complete_only_at_the_configured_commitments(solana, make_movement):
    recipient = Keypair().pubkey()
    movement = transfer(make_movement, asset="SOL", amount="0.5", to=recipient)
    node = solana.node

    seen = []
    for _ in range(12):
        run_workers_once()
        record = ChainTransaction.objects.filter(movement=movement).first()
        status = node.state()["landed"].get(record.tx_hash) if record else None
        depth = None if status is None else node.state()["slot"] - status["slot"]
        states = dict(movement.nodes.values_list("node_key", "node_state"))
        seen.append((depth, states["transfer"], states["transfer_observe"]))
        node.advance(1)

    for depth, transfer_state, observe_state in seen:
        if depth is None or depth < 2:  # processed only
            assert transfer_state not in ("COMPLETED",), seen
        if depth is not None and depth >= 2:
            assert transfer_state == "COMPLETED", seen
        if depth is None or depth < 6:  # not finalized
            assert observe_state != "COMPLETED", seen
    assert seen[-1][2] == "COMPLETED", seen


def test_a_lost_send_answer_is_recovered_by_signature_and_moves_money_once(solana, make_movement):
    recipient = Keypair().pubkey()
    # The node takes the transaction, then answers after the client (2 s timeout) gave up;
    # solana-py sends once more on a timeout, and that answer is lost too.
    solana.node.slow(3, method="sendTransaction", times=2)
    movement = transfer(make_movement, asset="SOL", amount="3", to=recipient)

    movement = drive(movement, solana.node)

    assert movement.request_state == "COMPLETED"
    transfer_node = movement.nodes.get(node_key="transfer")
    [record] = ChainTransaction.objects.filter(movement=movement)
    assert transfer_node.external_ref == record.tx_hash
    assert "UNKNOWN" in [e.new_state for e in transfer_node.events.all()]
    assert balance(solana.node, recipient) == lamports("3")


def test_the_signing_key_never_reaches_the_database_or_the_events(solana, make_movement):
    movement = drive(
        transfer(make_movement, asset="SOL", amount="0.1", to=Keypair().pubkey()), solana.node
    )
    secret = bytes(solana.treasury)

    texts = [str(movement.nodes.get(node_key="transfer").signed_payload)]
    for record in ChainTransaction.objects.filter(movement=movement):
        texts += [record.raw_signed, str(record.unsigned)]
        texts += [str(event.evidence) for event in record.events.all()]
    texts += [str(event.detail) for event in movement.events.all()]
    for text in texts:
        assert str(list(secret)) not in text
        assert str(solana.treasury) not in text


def test_a_node_that_fails_right_after_recording_the_expiry_carries_on_with_one_new_transaction(
    solana, make_movement
):
    recipient = Keypair().pubkey()
    solana.node.drop_next()
    movement = transfer(make_movement, asset="SOL", amount="1", to=recipient)
    for _ in range(4):
        run_workers_once()
        solana.node.advance(1)
    first = ChainTransaction.objects.get(movement=movement)
    solana.node.expire_blockhashes()
    # The fresh blockhash for the replacement cannot be had: the client (2 s) gives up twice.
    solana.node.slow(3, method="getLatestBlockhash", times=2)

    run_workers_once()
    first.refresh_from_db()
    assert first.state == "EXPIRED"
    assert ChainTransaction.objects.filter(movement=movement).count() == 1

    movement = drive(movement, solana.node)

    assert movement.request_state == "COMPLETED"
    second = ChainTransaction.objects.exclude(pk=first.pk).get(movement=movement)
    assert (second.replaces_id, second.state) == (first.pk, "FINALIZED")
    assert balance(solana.node, recipient) == lamports("1")


def test_transactions_that_keep_expiring_ask_an_operator_to_look_and_the_transfer_goes_on(
    solana, make_movement
):
    recipient = Keypair().pubkey()
    solana.node.drop_next(count=3)
    movement = transfer(make_movement, asset="SOL", amount="0.2", to=recipient)
    for _ in range(3):
        for _ in range(3):
            run_workers_once()
            solana.node.advance(1)
        solana.node.expire_blockhashes()

    movement = drive(movement, solana.node)

    assert movement.request_state == "COMPLETED"
    states = list(
        ChainTransaction.objects.filter(movement=movement)
        .order_by("id")
        .values_list("state", flat=True)
    )
    assert states == ["EXPIRED", "EXPIRED", "EXPIRED", "FINALIZED"]
    [attention] = MovementAttention.objects.filter(request=movement, reason="expired")
    assert "3 transactions" in attention.message
    assert balance(solana.node, recipient) == lamports("0.2")


def test_a_transfer_the_treasury_cannot_pay_fails_at_preflight_with_nothing_sent(
    solana, make_movement
):
    recipient = Keypair().pubkey()

    movement = drive(transfer(make_movement, asset="SOL", amount="25", to=recipient), solana.node)

    assert movement.request_state == "FAILED"
    [record] = ChainTransaction.objects.filter(movement=movement)
    assert record.state == "FAILED"
    assert "refused" in record.events.get(to_state="FAILED").evidence
    assert record.tx_hash not in solana.node.state()["sends"]
    assert balance(solana.node, recipient) == 0


def test_a_status_view_that_misses_a_landing_never_expires_it_or_pays_twice(solana, make_movement):
    import time

    recipient = Keypair().pubkey()
    movement = transfer(make_movement, asset="SOL", amount="3", to=recipient)
    for _ in range(20):
        run_workers_once()
        first = ChainTransaction.objects.filter(movement=movement).first()
        if first is not None and first.state == "BROADCAST":
            break
    assert first is not None and first.state == "BROADCAST"
    # It lands at the next slot; the status view stays stuck before it for a while, while
    # the chain runs far past its blockhash's last valid height.
    lag_seconds = 6
    solana.node.lag_status(first.tx_hash, lag_seconds)
    lagged_at = time.monotonic()
    solana.node.advance(1)
    assert first.tx_hash in solana.node.state()["landed"]
    solana.node.expire_blockhashes()
    while time.monotonic() - lagged_at < lag_seconds - 1:
        run_workers_once()
        solana.node.advance(1)

    first.refresh_from_db()
    assert first.state != "EXPIRED"
    assert ChainTransaction.objects.filter(movement=movement).count() == 1

    time.sleep(max(0.0, lag_seconds - (time.monotonic() - lagged_at)) + 0.2)
    movement = drive(movement, solana.node)

    assert movement.request_state == "COMPLETED"
    assert balance(solana.node, recipient) == lamports("3")  # paid once
    [record] = ChainTransaction.objects.filter(movement=movement)
    assert record.state == "FINALIZED" and record.tx_hash == first.tx_hash
    assert not record.events.filter(to_state="EXPIRED").exists()


def test_an_spl_token_whose_mint_decimals_differ_from_the_config_is_refused_at_create(
    solana, make_movement
):
    from pathlib import Path

    import yaml

    path = Path(solana.config_path)
    config = yaml.safe_load(path.read_text())
    config["chains"]["solana"]["tokens"]["USDC"]["decimals"] = 8  # the mint has 6
    path.write_text(yaml.safe_dump(config))

    movement = make_movement(
        "sol_transfer",
        asset="USDC",
        amount="5",
        source=TREASURY,
        destination=str(Keypair().pubkey()),
    )

    assert movement.request_state == "FAILED"
    assert "has 6 decimals, the reviewed config says 8" in movement.failure_reason
    assert not ChainTransaction.objects.filter(movement=movement).exists()


def test_the_console_reads_a_sol_and_a_usdc_transfer(solana, make_movement, client):
    """Issue 31: the fee in SOL and lamports, the decoded transfer, its depth against the
    chain's finality commitment, the family's explorer link (the config names none)."""
    recipient = Keypair().pubkey()
    sol = drive(transfer(make_movement, asset="SOL", amount="1.25", to=recipient), solana.node)
    usdc = drive(transfer(make_movement, asset="USDC", amount="2.5", to=recipient), solana.node)
    [coin] = ChainTransaction.objects.filter(movement=sol)
    [token] = ChainTransaction.objects.filter(movement=usdc)

    text, html = chain_transaction_page(client, coin)
    assert "0.000005 SOL (5,000 lamports)" in text
    assert f"SOL transfer of 1.25 SOL to {recipient}" in text
    assert "final by policy commitment finalized" in text
    assert f'href="https://explorer.solana.com/tx/{coin.tx_hash}"' in html
    assert f"recent blockhash: {coin.unsigned['blockhash']}" in text

    text, _ = chain_transaction_page(client, token)
    assert f"SPL token transfer of 2.5 USDC to {recipient}" in text
    assert f"mint {solana.usdc_mint}" in text


def test_a_send_is_fenced_for_the_chains_rpc_timeout_so_a_dead_worker_hands_over_soon(
    solana, make_movement, monkeypatch, settings
):
    """When the signed transaction leaves, the node's lease outlasts the send (the chain's
    2 s RPC timeout) by the fence's margins and no more: a worker that dies with the send out
    leaves its node to recovery within seconds, not after a generic 30 s call timeout."""
    from movements.models import MovementRequestNode
    from venues.solana.rpc import SolanaRpcClient

    settings.QTG_LEASE_SECONDS = 5  # the real-process tests' lease: shorter than the fence
    leases = []
    send = SolanaRpcClient.send

    def watched(self, raw, **kwargs):
        row = MovementRequestNode.objects.get(node_key="transfer", node_state="SUBMITTING")
        leases.append((row.fenced_at, row.fenced_until, row.lease_expires_at))
        return send(self, raw, **kwargs)

    monkeypatch.setattr(SolanaRpcClient, "send", watched)

    movement = drive(
        transfer(make_movement, asset="SOL", amount="0.2", to=Keypair().pubkey()), solana.node
    )

    assert movement.request_state == "COMPLETED"
    [(fenced_at, fenced_until, lease_expires_at)] = leases
    assert 2 <= (fenced_until - fenced_at).total_seconds() <= 2 + 1
    # The plain 5 s lease, or the fence's 2 + 1 + 2 s, whichever is longer (a moment after).
    assert (lease_expires_at - fenced_at).total_seconds() <= max(5, 2 + 1 + 2) + 0.5

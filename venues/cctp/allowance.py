"""The one-time allowance step of a CCTP burn: ``depositForBurn`` pulls the USDC it burns with
``transferFrom``, so the account must first have allowed Circle's TokenMessenger to.

The allowance belongs to the account, not to one movement: the first burn of an account finds
it missing and sends ``approve(messenger, 2**256 - 1)`` once (the common practice with
Circle's audited messenger; every later burn of the account finds it in place). That
transaction goes through the EVM machinery like any other: a nonce from QTG's allocator, the
account's ``Signer``, its bytes stored before they are broadcast, its life in the
chain-transaction table (linked to the movement that needed it, not to a node: the burn node's
own transaction is its burn). Until the chain shows the allowance, the burn's ``prepare``
raises ``TransientError`` (the node waits in READY, nothing burned, no nonce taken for it).
"""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.utils import timezone

from movements.executors.base import DeterministicError, ExecutionContext, TransientError
from venues.evm import client
from venues.evm.config import EvmChain
from venues.evm.tx import (
    ACTOR,
    Transfer,
    check_chain_id,
    create_with_new_nonce,
    rpc_read,
    send_stored,
    sign_stored,
    signer_of,
)
from venues.evm.tx.track import follow
from venues.models import LIVE_TX_STATES, ChainTransaction, TxState
from venues.nonces import sender_lock
from venues.transactions import chain_transaction_transition

S = TxState
APPROVE_SELECTOR = "0x095ea7b3"  # approve(address,uint256)
ALLOWANCE_SELECTOR = "0xdd62ed3e"  # allowance(address,address)
BALANCE_SELECTOR = "0x70a08231"  # balanceOf(address)
UNLIMITED = 2**256 - 1


def _word(address: str) -> str:
    return bytes.fromhex(address[2:].lower()).rjust(32, b"\0").hex()


def _read_uint(w3: Any, to: str, data: str) -> int:
    raw = rpc_read("eth_call", w3.eth.call, {"to": to, "data": data})
    return int.from_bytes(bytes(raw), "big") if raw else 0


def allowance(w3: Any, usdc: str, owner: str, spender: str) -> int:
    return _read_uint(w3, usdc, ALLOWANCE_SELECTOR + _word(owner) + _word(spender))


def balance(w3: Any, usdc: str, owner: str) -> int:
    return _read_uint(w3, usdc, BALANCE_SELECTOR + _word(owner))


def _approvals(chain: EvmChain, sender: str, usdc: str) -> list[ChainTransaction]:
    """The account's allowance transactions still in flight (CREATED included: a worker that
    died before signing one left its nonce to it, and the next look signs and sends it)."""
    return [
        tx
        for tx in ChainTransaction.objects.filter(
            chain=chain.name,
            sender=sender,
            node__isnull=True,
            state__in=[*LIVE_TX_STATES, S.CREATED],
        ).order_by("id")
        if str(tx.unsigned.get("to", "")).lower() == usdc.lower()
        and str(tx.unsigned.get("data", "")).startswith(APPROVE_SELECTOR)
    ]


def _settle(w3: Any, chain: EvmChain, tx: ChainTransaction) -> None:
    """One look at an allowance transaction, by the transaction manager's steps
    (``venues.evm.tx.track.follow``): mined -> CONFIRMED, FINALIZED at the chain's finality
    (FAILED if it reverted); unknown to the node -> its stored bytes again."""
    head = rpc_read("block number", lambda: w3.eth.block_number)
    follow(w3, chain, tx, head=head, now=timezone.now())


def settle_allowances(chain: EvmChain, sender: str, usdc: str) -> None:
    """Move the account's allowance transactions along (the burn's observe calls it)."""
    w3 = client.web3_for(chain)
    for tx in _approvals(chain, sender, usdc):
        _settle(w3, chain, tx)


def ensure_allowance(
    ctx: ExecutionContext, owner: Transfer, *, usdc: str, spender: str, units: int
) -> dict[str, Any]:
    """Return once ``spender`` may pull ``units`` of ``usdc`` from the account; else make sure
    the allowance transaction is on its way and raise ``TransientError``."""
    chain = owner.chain
    w3 = client.web3_for(chain)
    held = balance(w3, usdc, owner.sender)
    if held < units:
        raise DeterministicError(
            f"account {owner.account_name} holds {held} USDC units on {chain.name}, "
            f"the burn needs {units}",
            evidence={"balance_units": held, "needed_units": units},
        )
    allowed = allowance(w3, usdc, owner.sender, spender)
    if allowed >= units:
        for tx in _approvals(chain, owner.sender, usdc):
            _settle(w3, chain, tx)
        return {"allowance_units": str(allowed)}
    in_flight = _approvals(chain, owner.sender, usdc)
    for tx in in_flight:
        _settle(w3, chain, tx)
    if not in_flight:
        _send_approval(ctx, owner, usdc=usdc, spender=spender)
    raise TransientError(
        f"waiting for the USDC allowance of {owner.account_name} to the TokenMessenger",
        evidence={"allowance_units": str(allowed), "needed_units": units},
        retry_after=chain.block_seconds,
    )


def _send_approval(ctx: ExecutionContext, owner: Transfer, *, usdc: str, spender: str) -> None:
    """One approve per (chain, sender, spender) at a time: decided under the sender's lock
    (``venues.nonces.sender_lock``), so two first burns never both send one. The approve is
    the sender's, not the movement's (no node; ``movement`` names who first asked for it)."""
    chain = owner.chain
    signer = signer_of(owner)
    w3 = client.web3_for(chain)
    check_chain_id(w3, chain)
    chain_next = rpc_read("nonce", w3.eth.get_transaction_count, owner.sender, "pending")
    with transaction.atomic():
        sender_lock(chain=chain.name, sender=owner.sender, chain_next=chain_next)
        if _approvals(chain, owner.sender, usdc):
            return  # another worker's, decided just now
        tx = _create_approval(ctx, owner, w3, usdc=usdc, spender=spender)
    tx = sign_stored(tx, signer)
    sent = send_stored(w3, tx)
    if sent.outcome in ("sent", "known"):
        chain_transaction_transition(
            chain_transaction_id=tx.pk,
            to_state=S.BROADCAST,
            actor=ACTOR,
            evidence={"rpc": sent.outcome},
        )


def _create_approval(
    ctx: ExecutionContext, owner: Transfer, w3: Any, *, usdc: str, spender: str
) -> ChainTransaction:
    chain = owner.chain
    call = {"to": usdc, "value": 0, "data": APPROVE_SELECTOR + _word(spender) + f"{UNLIMITED:064x}"}
    gas = int(rpc_read("gas estimate", w3.eth.estimate_gas, {"from": owner.sender, **call}) * 1.2)
    return create_with_new_nonce(
        w3,
        chain,
        owner.sender,
        call,
        gas=gas,
        movement_id=ctx.request_id,
        evidence={
            "purpose": "cctp allowance",
            "owned_by": "sender",
            "spender": spender,
            "first_asked_by": ctx.node_key,
        },
    )

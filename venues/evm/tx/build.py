"""Build: what a node moves (``Transfer``, or a contract call ``ContractCall``) resolved
against the chain's configuration, and its CREATED transaction with a nonce from QTG's
allocator, a gas estimate and EIP-1559 fees from the chain's policy (a retry finds it and
re-uses it)."""

from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.db import transaction

from movements.executors.base import (
    DeterministicError,
    ExecutionContext,
    TransientError,
    VenueWait,
)
from venues.evm import client
from venues.evm.config import GWEI, EvmChain
from venues.evm.tx.common import ACTOR, S, chain_of, rpc_read, stored_fields
from venues.evm.tx.heads import Head, SenderReads, latest, sender_reads
from venues.models import ChainTransaction
from venues.nonces import InFlightFull, nonce_allocate
from venues.signing import Signer, signer_for
from venues.transactions import chain_transaction_create

TRANSFER_SELECTOR = "0xa9059cbb"  # transfer(address,uint256)


# ERC-20 gas estimates get a margin (a token's storage may be warmer at estimate time).
GAS_MARGIN = Decimal("1.2")


@dataclass(frozen=True)
class Transfer:
    """What a node moves, resolved against the chain's configuration."""

    chain: EvmChain
    sender: str  # the configured account's address
    account_name: str
    recipient: str
    symbol: str
    units: int  # in the asset's smallest unit
    token: str  # ERC-20 contract address; '' for the native coin

    def call(self) -> dict[str, Any]:
        """to / value / data of the transaction that performs it."""
        if not self.token:
            return {"to": self.recipient, "value": self.units, "data": "0x"}
        data = (
            TRANSFER_SELECTOR
            + bytes.fromhex(self.recipient[2:].lower()).rjust(32, b"\0").hex()
            + self.units.to_bytes(32, "big").hex()
        )
        return {"to": self.token, "value": 0, "data": data}


@dataclass(frozen=True)
class ContractCall(Transfer):
    """A call of a contract (``recipient``) by a configured account, carried through the
    transaction manager exactly as a transfer is (``units``/``token`` describe what it
    moves, for the record; ``data`` is the call)."""

    data: str = ""

    def call(self) -> dict[str, Any]:
        return {"to": self.recipient, "value": 0, "data": self.data}


def resolve_transfer(
    chain: EvmChain, *, asset: str, amount: Decimal, source: str, destination: str
) -> Transfer:
    """The transfer a node describes, or ``LookupError``/``ValueError`` saying why it cannot
    be carried out on ``chain`` (an unconfigured token or account, too many decimals)."""
    token = chain.asset(asset)
    account = chain.account(source)
    if not account.key:
        raise LookupError(f"account {source} of chain {chain.name} names no key")
    if not isinstance(amount, Decimal) or not amount.is_finite() or amount <= 0:
        raise ValueError(f"amount must be a positive decimal, got {amount!r}")
    return Transfer(
        chain=chain,
        sender=account.address,
        account_name=source,
        recipient=chain.address_of(destination),
        symbol=asset,
        units=token.to_base_units(amount),
        token=token.address,
    )


def signer_of(transfer: Transfer) -> Signer:
    """The account's signer, checked to sign for the configured address."""
    account = transfer.chain.account(transfer.account_name)
    signer = signer_for(account.key, what=f"account {account.name} of chain {transfer.chain.name}")
    if signer.address().lower() != account.address.lower():
        raise DeterministicError(
            f"the key of account {account.name} signs for {signer.address()}, "
            f"not the configured {account.address}"
        )
    return signer


def signer_of_tx(tx: ChainTransaction) -> Signer:
    chain = chain_of(tx)
    for account in chain.accounts.values():
        if account.address.lower() == tx.sender.lower():
            transfer = Transfer(chain, account.address, account.name, "", "", 0, "")
            return signer_of(transfer)
    raise DeterministicError(f"no configured account of chain {chain.name} is {tx.sender}")


def node_transactions(node_id: int, *, read_with: Any = None) -> list[ChainTransaction]:
    """Everything a node attempt signed, oldest first (one nonce: the original and its
    replacements). A transaction whose nonce was filled before it was ever signed (released:
    ``venues.evm.tx.gaps.held_unsigned``) is not the node's any more. ``read_with``: a
    function of the queryset that adds what the caller reads in the same statement
    (``venues.evm.tx.gaps.with_gap_hint``)."""
    rows = (
        ChainTransaction.objects.filter(node_id=node_id)
        .exclude(state=S.REPLACED, tx_hash="")
        .order_by("id")
    )
    return list(read_with(rows) if read_with is not None else rows)


def transaction_by_hash(chain: str, tx_hash: str) -> ChainTransaction | None:
    return ChainTransaction.objects.filter(chain=chain, tx_hash=tx_hash).first()


def check_chain_id(w3: Any, chain: EvmChain) -> None:
    found = rpc_read("eth_chainId", lambda: w3.eth.chain_id)
    if found != chain.chain_id:
        raise DeterministicError(
            f"chain {chain.name}: the RPC node serves chain id {found}, not {chain.chain_id}"
        )


def fees(w3: Any, chain: EvmChain, *, head: Head | None = None) -> tuple[int, int, int]:
    """(base fee, max fee, priority fee) for a new transaction: twice the base fee plus the
    tip, capped at the chain's ``max_fee_gwei``. A base fee at or above the cap is transient
    (and an operator is told): nothing is sent that could not be mined. ``head``: the head
    block already read (else it is read now)."""
    if head is None or head.base_fee is None:
        head = latest(w3)
    base = int(head.base_fee)  # type: ignore[arg-type]  (a chain without EIP-1559: refused)
    tip = chain.priority_fee_wei
    max_fee = min(2 * base + tip, chain.max_fee_wei)
    if max_fee < base + tip:
        raise TransientError(
            f"chain {chain.name}: base fee {base / GWEI} gwei leaves no room under the cap "
            f"of {chain.max_fee_wei / GWEI} gwei",
            evidence={
                "base_fee_wei": base,
                "max_fee_wei": chain.max_fee_wei,
                "attention": {
                    "reason": "fee_cap",
                    "message": f"the base fee on {chain.name} is above the configured cap",
                },
            },
            retry_after=chain.replace_after_seconds,
        )
    return base, max_fee, tip


def prepare_transfer(
    ctx: ExecutionContext,
    transfer: Transfer,
    *,
    existing: list[ChainTransaction] | None = None,
) -> tuple[ChainTransaction, bool]:
    """The node's CREATED (or later) transaction: found if an earlier try of this attempt
    made it (its nonce re-used), else built now with a freshly allocated nonce. Returns it
    and whether it was re-used. ``existing``: the node's transactions, if just read."""
    if existing is None:
        existing = node_transactions(ctx.node_id)
    if existing:
        return existing[0], True
    chain = transfer.chain
    signer_of(transfer)  # a missing key fails the node here, before a nonce is taken
    w3 = client.web3_for(chain)
    check_chain_id(w3, chain)
    asset = chain.tokens.get(transfer.symbol)
    if transfer.token and asset is not None and asset.address.lower() == transfer.token.lower():
        from venues.evm.facts import check_decimals

        check_decimals(chain, asset, w3=w3)
    call = transfer.call()
    reads = sender_reads(w3, transfer.sender, estimate={"from": transfer.sender, **call})
    try:
        estimate = reads.gas
        if estimate is None:  # refused in the batch: asked alone, its refusal classified
            estimate = w3.eth.estimate_gas({"from": transfer.sender, **call})
    except Exception as exc:
        message = client.rpc_message(exc)
        if client.is_network_error(exc):
            raise TransientError(f"gas estimate: {exc}"[:500]) from exc
        if message or type(exc).__name__ == "ContractLogicError":
            # The chain says this transfer reverts or cannot be paid for.
            raise DeterministicError(
                f"gas estimate refused: {message or exc}"[:500],
                evidence={"estimate_error": str(exc)[:500]},
            ) from exc
        raise
    gas = int(estimate) if not transfer.token else int(Decimal(estimate) * GAS_MARGIN)
    tx = create_with_new_nonce(
        w3,
        chain,
        transfer.sender,
        call,
        gas=gas,
        movement_id=ctx.request_id,
        node_id=ctx.node_id,
        evidence={"gas_estimate": int(estimate)},
        reads=reads if reads.gas is not None else None,
    )
    return tx, False


def create_with_new_nonce(
    w3: Any,
    chain: EvmChain,
    sender: str,
    call: dict[str, Any],
    *,
    gas: int,
    movement_id: Any,
    node_id: int | None = None,
    evidence: dict[str, Any],
    reads: SenderReads | None = None,
) -> ChainTransaction:
    """A CREATED transaction of ``call`` (to, value, data) at the sender's next nonce, with
    the chain's fees now: the nonce is allocated in the transaction that records it.

    Pipelined: the sender's earlier transactions need not be mined first, but at most
    ``QTG_EVM_MAX_IN_FLIGHT`` of its nonces are allocated and not mined at once (counted
    from the chain's mined count under the nonce cursor's lock); past it nothing is taken and
    the node waits for a block (``VenueWait``: not counted as a venue error). ``reads``: the
    sender's counts and the head, if just read (``heads.sender_reads``)."""
    if reads is None:
        reads = sender_reads(w3, sender)
    chain_next, chain_mined = reads.pending, reads.mined
    _, max_fee, tip = fees(w3, chain, head=reads.head)
    head = reads.head.number
    with transaction.atomic():
        try:
            nonce = nonce_allocate(
                chain=chain.name,
                sender=sender,
                chain_next=chain_next,
                chain_mined=chain_mined,
                max_in_flight=settings.QTG_EVM_MAX_IN_FLIGHT,
            )
        except InFlightFull as full:
            raise VenueWait(
                f"{sender} on {chain.name}: {full}; waiting for a block",
                evidence={
                    "in_flight": full.in_flight,
                    "max_in_flight": full.limit,
                    "next_nonce": full.next_nonce,
                    "chain_mined": full.chain_mined,
                },
                retry_after=chain.block_seconds,
            ) from None
        unsigned = {
            "chainId": chain.chain_id,
            "nonce": nonce,
            **call,
            "gas": gas,
            "maxFeePerGas": max_fee,
            "maxPriorityFeePerGas": tip,
        }
        return chain_transaction_create(
            chain=chain.name,
            sender=sender,
            nonce=nonce,
            unsigned=stored_fields(unsigned),
            actor=ACTOR,
            movement_id=movement_id,
            node_id=node_id,
            family="evm",
            detail={"gas_limit": gas, "max_fee_per_gas": max_fee, "max_priority_fee_per_gas": tip},
            evidence={**evidence, "chain_next_nonce": chain_next, "head": head},
        )

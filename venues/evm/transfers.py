"""Native and ERC-20 transfers on an EVM chain, one node's transactions at a time.

- ``prepare_transfer``: the transaction with a nonce from QTG's allocator, a gas estimate and
  EIP-1559 fees from the chain's policy, stored CREATED (a retry finds it and re-uses it);
- ``sign_transfer``: signed by the account's ``Signer``, raw bytes and hash stored (SIGNED)
  BEFORE anything is broadcast; a second call returns the stored bytes, never re-signs;
- ``broadcast_transfer``: the stored bytes handed to the node (BROADCAST);
- ``track``: one look at everything the node signed (the original and its fee-bump
  replacements, all with the same nonce): receipts, the mempool, re-broadcasts of stored
  bytes, reorgs, finality, a fee bump of the sender's lowest stuck nonce, and a filler for
  any nonce of the sender an ended node left unused (``venues.evm.gaps``).
"""

import logging
from dataclasses import dataclass, field
from datetime import timedelta
from decimal import Decimal
from typing import Any

from django.db import transaction
from django.utils import timezone

from movements.executors.base import (
    AmbiguousError,
    DeterministicError,
    ExecutionContext,
    TransientError,
)
from qtg.core.actors import Actor
from venues.evm import client
from venues.evm.config import GWEI, EvmChain
from venues.evm.faults import crash_point
from venues.models import LIVE_TX_STATES, ChainTransaction, TxState
from venues.nonces import nonce_allocate
from venues.signing import Signer, signer_for
from venues.transactions import (
    chain_transaction_count_confirmations,
    chain_transaction_create,
    chain_transaction_record,
    chain_transaction_transition,
)

S = TxState
log = logging.getLogger(__name__)
ACTOR = Actor.system("venues.evm")
TRANSFER_SELECTOR = "0xa9059cbb"  # transfer(address,uint256)
TRANSFER_TOPIC = "0xddf252ad1be2c89b69c2b068fc378daa952ba7f163c4a11628f55a4df523b3ef"
# ERC-20 gas estimates get a margin (a token's storage may be warmer at estimate time).
GAS_MARGIN = Decimal("1.2")
# Fields of the stored unsigned transaction that are integers (stored as decimal strings:
# wei values do not fit JSON numbers everywhere).
INT_FIELDS = ("chainId", "nonce", "value", "gas", "maxFeePerGas", "maxPriorityFeePerGas")


def _rpc(what: str, fn, *args, **kwargs):
    """A read from the node: a timeout or an RPC error answer is transient (asked again
    later: before a submit nothing has left the building, after it a read changes nothing)."""
    try:
        return fn(*args, **kwargs)
    except Exception as exc:
        if client.is_network_error(exc) or client.rpc_message(exc):
            raise TransientError(f"{what}: {type(exc).__name__}: {exc}"[:500]) from exc
        raise


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


# --- the node's transactions --------------------------------------------------------------


def node_transactions(node_id: int) -> list[ChainTransaction]:
    """Everything a node attempt signed, oldest first (one nonce: the original and its
    replacements)."""
    return list(ChainTransaction.objects.filter(node_id=node_id).order_by("id"))


def transaction_by_hash(chain: str, tx_hash: str) -> ChainTransaction | None:
    return ChainTransaction.objects.filter(chain=chain, tx_hash=tx_hash).first()


def _unsigned_for_signing(unsigned: dict[str, Any]) -> dict[str, Any]:
    tx = dict(unsigned)
    for name in INT_FIELDS:
        if name in tx:
            tx[name] = int(tx[name])
    tx["type"] = 2
    return tx


def _stored(tx: dict[str, Any]) -> dict[str, Any]:
    return {name: (str(value) if name in INT_FIELDS else value) for name, value in tx.items()}


def check_chain_id(w3: Any, chain: EvmChain) -> None:
    found = _rpc("eth_chainId", lambda: w3.eth.chain_id)
    if found != chain.chain_id:
        raise DeterministicError(
            f"chain {chain.name}: the RPC node serves chain id {found}, not {chain.chain_id}"
        )


def fees(w3: Any, chain: EvmChain) -> tuple[int, int, int]:
    """(base fee, max fee, priority fee) for a new transaction: twice the base fee plus the
    tip, capped at the chain's ``max_fee_gwei``. A base fee at or above the cap is transient
    (and an operator is told): nothing is sent that could not be mined."""
    base = int(_rpc("latest block", w3.eth.get_block, "latest")["baseFeePerGas"])
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


def prepare_transfer(ctx: ExecutionContext, transfer: Transfer) -> tuple[ChainTransaction, bool]:
    """The node's CREATED (or later) transaction: found if an earlier try of this attempt
    made it (its nonce re-used), else built now with a freshly allocated nonce. Returns it
    and whether it was re-used."""
    existing = node_transactions(ctx.node_id)
    if existing:
        return existing[0], True
    chain = transfer.chain
    signer_of(transfer)  # a missing key fails the node here, before a nonce is taken
    w3 = client.web3_for(chain)
    check_chain_id(w3, chain)
    call = transfer.call()
    try:
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
) -> ChainTransaction:
    """A CREATED transaction of ``call`` (to, value, data) at the sender's next nonce, with
    the chain's fees now: the nonce is allocated in the transaction that records it."""
    _, max_fee, tip = fees(w3, chain)
    chain_next = _rpc("nonce", w3.eth.get_transaction_count, sender, "pending")
    with transaction.atomic():
        nonce = nonce_allocate(chain=chain.name, sender=sender, chain_next=chain_next)
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
            unsigned=_stored(unsigned),
            actor=ACTOR,
            movement_id=movement_id,
            node_id=node_id,
            gas_limit=gas,
            max_fee_per_gas=max_fee,
            max_priority_fee_per_gas=tip,
            evidence={**evidence, "chain_next_nonce": chain_next},
        )


def sign_stored(tx: ChainTransaction, signer: Signer) -> ChainTransaction:
    """Sign a CREATED transaction and store its bytes and hash (SIGNED) before anyone may
    broadcast them. Already signed: the stored transaction, never signed again."""
    if tx.state != S.CREATED:
        return tx
    signed = signer.sign_transaction(tx.chain, _unsigned_for_signing(tx.unsigned))
    tx = chain_transaction_transition(
        chain_transaction_id=tx.pk,
        to_state=S.SIGNED,
        actor=ACTOR,
        expected=[S.CREATED],
        fields={"raw_signed": "0x" + signed.raw.hex(), "tx_hash": signed.tx_hash},
        evidence={"tx_hash": signed.tx_hash, "nonce": tx.nonce},
    )
    crash_point("after_sign")
    return tx


@dataclass
class Sent:
    """What the node said to the stored bytes."""

    outcome: str  # sent | known | nonce_used | refused
    message: str = ""


def send_stored(w3: Any, tx: ChainTransaction) -> Sent:
    """Hand the stored bytes to the node. Network errors propagate (the caller decides what
    they mean at its step)."""
    try:
        w3.eth.send_raw_transaction(tx.raw_signed)
    except Exception as exc:
        message = client.rpc_message(exc)
        if not message:
            raise
        if client.says(message, client.ALREADY_KNOWN):
            return Sent("known", message)
        if client.says(message, client.NONCE_USED):
            return Sent("nonce_used", message)
        return Sent("refused", message)
    return Sent("sent")


def broadcast_transfer(tx: ChainTransaction) -> Sent:
    """The submit of a signed transfer: its stored bytes to the node, then BROADCAST. A lost
    answer or any error that leaves doubt is ambiguous (the node goes UNKNOWN and recovery
    looks the hash up); "nonce too low" is never read as a failure without that look."""
    chain_cfg = _chain_of(tx)
    w3 = client.web3_for(chain_cfg)
    crash_point("before_broadcast")
    try:
        sent = send_stored(w3, tx)
    except Exception as exc:
        raise AmbiguousError(
            f"broadcast of {tx.tx_hash}: {type(exc).__name__}: {exc}"[:500],
            evidence={"tx_hash": tx.tx_hash},
        ) from exc
    crash_point("after_broadcast")
    if sent.outcome in ("sent", "known"):
        _to(tx, S.BROADCAST, {"rpc": sent.outcome, "message": sent.message})
        return sent
    if sent.outcome == "nonce_used":
        # Ours already, mined or pending? Only the hash can tell.
        if client.receipt_of(w3, tx.tx_hash) or client.transaction_of(w3, tx.tx_hash):
            _to(tx, S.BROADCAST, {"rpc": sent.message, "found_by_hash": True})
            return sent
        raise AmbiguousError(
            f"{sent.message}: the chain does not know {tx.tx_hash} (yet)",
            evidence={"tx_hash": tx.tx_hash, "nonce": tx.nonce},
        )
    chain_transaction_record(
        chain_transaction_id=tx.pk,
        actor=ACTOR,
        evidence={"broadcast_refused": sent.message},
    )
    raise AmbiguousError(
        f"the node refused {tx.tx_hash}: {sent.message}",
        evidence={
            "tx_hash": tx.tx_hash,
            "refused": sent.message,
            "attention": {
                "reason": "broadcast_refused",
                "message": f"the node refused the signed transaction: {sent.message}",
            },
        },
    )


def _chain_of(tx: ChainTransaction) -> EvmChain:
    from venues.evm.config import evm_chain

    return evm_chain(tx.chain)


def _to(tx: ChainTransaction, state: str, evidence: dict[str, Any], **fields: Any) -> None:
    """Move ``tx`` (and the caller's copy) to ``state`` if it is not there already."""
    if tx.state == state:
        return
    moved = chain_transaction_transition(
        chain_transaction_id=tx.pk,
        to_state=state,
        actor=ACTOR,
        evidence=evidence,
        fields=fields or None,
        expected=[tx.state],
    )
    for name in ("state", "state_changed_at", *fields, *_STAMP_FIELDS):
        setattr(tx, name, getattr(moved, name))


_STAMP_FIELDS = ("signed_at", "broadcast_at", "pending_at", "confirmed_at", "finalized_at")


# --- one look at a node's transactions ------------------------------------------------------


@dataclass
class Track:
    """Where a node's transactions stand after one look."""

    status: str  # none | waiting | finalized | failed | dropped
    winner: ChainTransaction | None = None
    original: ChainTransaction | None = None
    reorg: dict[str, Any] | None = None
    attention: dict[str, Any] | None = None
    detail: dict[str, Any] = field(default_factory=dict)
    receipt: Any = None

    def summary(self) -> dict[str, Any]:
        detail = dict(self.detail)
        if self.winner is not None:
            detail |= {
                "tx_hash": self.winner.tx_hash,
                "block_number": self.winner.block_number,
                "block_hash": self.winner.block_hash,
                "confirmations": self.winner.confirmations,
            }
        if self.attention:
            detail["attention"] = self.attention
        if self.reorg:
            detail["reorg"] = self.reorg
        return detail


def track(node_id: int, *, now=None) -> Track:
    """Look at everything the node signed and move each transaction along: a receipt makes
    it CONFIRMED (its rivals with the same nonce REPLACED) and, at the chain's finality,
    FINALIZED (FAILED if it reverted); a block that is no longer canonical walks it back to
    PENDING (re-broadcast if it left the mempool); the newest transaction not seen by the
    network within the broadcast window is re-broadcast from its stored bytes; one PENDING
    longer than ``replace_after_seconds`` is replaced by a fee bump."""
    now = now or timezone.now()
    txs = node_transactions(node_id)
    if not txs:
        return Track("none")
    original = txs[0]
    chain = _chain_of(original)
    w3 = client.web3_for(chain)
    result = Track("waiting", original=original)
    head = _rpc("block number", lambda: w3.eth.block_number)
    result.detail |= _fill_gaps(w3, chain, original.sender, head=head, now=now)
    settled = [
        tx for tx in txs if tx.state == S.FINALIZED or (tx.state == S.FAILED and tx.block_hash)
    ]
    if settled:
        # Already final (an earlier look that was not written through to the node).
        winner = settled[0]
        result.winner = winner
        result.receipt = _rpc("receipt", client.receipt_of, w3, winner.tx_hash)
        result.status = "finalized" if winner.state == S.FINALIZED else "failed"
        if result.status == "failed":
            result.detail["revert_reason"] = revert_reason(w3, winner)
        return result
    live = [tx for tx in txs if tx.state in LIVE_TX_STATES or tx.state == S.CREATED]
    looks = {}
    for tx in live:
        if tx.state == S.CREATED:
            continue
        receipt = _rpc("receipt", client.receipt_of, w3, tx.tx_hash)
        looks[tx.pk] = receipt
    mined = [tx for tx in live if looks.get(tx.pk) is not None]
    # A block that took a CONFIRMED transaction away (or put it elsewhere).
    for tx in live:
        if tx.state != S.CONFIRMED:
            continue
        receipt = looks.get(tx.pk)
        if receipt is not None and receipt["blockHash"].to_0x_hex() == tx.block_hash:
            continue
        result.reorg = _walk_back(tx, receipt, head)
        result.attention = {
            "reason": "reorg",
            "message": f"block {result.reorg['old_block_number']} of {chain.name} left the "
            f"canonical chain with transaction {tx.tx_hash}",
        }
    if mined:
        winner = mined[0]
        _confirm(winner, looks[winner.pk], head, chain)
        for rival in live:
            if rival.pk != winner.pk and rival.state not in (S.REPLACED,):
                _to(rival, S.REPLACED, {"replaced_by": winner.tx_hash, "nonce": winner.nonce})
        result.winner, result.receipt = winner, looks[winner.pk]
        if winner.state == S.FINALIZED:
            result.status = "finalized"
        elif winner.state == S.FAILED:
            result.status = "failed"
            result.detail["revert_reason"] = revert_reason(w3, winner)
        else:
            result.detail["waiting_for"] = f"{chain.confirmations} confirmations"
        return result
    newest = live[-1] if live else None
    if newest is None:
        dropped = all(tx.state == S.DROPPED for tx in txs)
        result.status = "dropped" if dropped else "none"
        return result
    newest = _keep_in_mempool(w3, chain, newest, txs, result, now=now)
    if result.status == "waiting" and newest.state in (S.PENDING, S.BROADCAST, S.SIGNED):
        _maybe_bump(w3, chain, newest, result, now=now)
    return result


def _fill_gaps(w3: Any, chain: EvmChain, sender: str, *, head: int, now) -> dict[str, Any]:
    """The sender's nonces left unused by ended nodes filled (``venues.evm.gaps``), at every
    look at one of its nodes: a transfer waiting behind a gap is what notices it. Its own
    trouble (the node not answering, no key) never fails the node being looked at."""
    from venues.evm.gaps import fill_nonce_gaps

    try:
        report = fill_nonce_gaps(chain, sender, w3=w3, head=head, now=now)
    except Exception as exc:
        log.warning("nonce gaps of %s on %s: %s", sender, chain.name, exc, exc_info=True)
        return {"nonce_gap_error": f"{type(exc).__name__}: {exc}"[:300]}
    if not report.filled:
        return {}
    return {"nonces_filled": {str(tx.nonce): tx.tx_hash for tx in report.filled}}


def _walk_back(tx: ChainTransaction, receipt: Any, head: int) -> dict[str, Any]:
    evidence = {
        "old_block_number": tx.block_number,
        "old_block_hash": tx.block_hash,
        "head": head,
        "now_in_block": receipt["blockHash"].to_0x_hex() if receipt is not None else None,
    }
    _to(tx, S.PENDING, {"reorg": evidence}, block_number=None, block_hash="", confirmations=0)
    return evidence


def _confirm(tx: ChainTransaction, receipt: Any, head: int, chain: EvmChain) -> None:
    block_number = int(receipt["blockNumber"])
    block_hash = receipt["blockHash"].to_0x_hex()
    if tx.state != S.CONFIRMED:
        if tx.state == S.SIGNED:
            _to(tx, S.BROADCAST, {"found_by_hash": True})
        fee = int(receipt["gasUsed"]) * int(receipt.get("effectiveGasPrice") or 0)
        _to(
            tx,
            S.CONFIRMED,
            {
                "block_number": block_number,
                "block_hash": block_hash,
                "status": int(receipt["status"]),
                "gas_used": int(receipt["gasUsed"]),
            },
            block_number=block_number,
            block_hash=block_hash,
            fee_paid=fee,
        )
    confirmations = max(0, head - block_number + 1)
    chain_transaction_count_confirmations(chain_transaction_id=tx.pk, confirmations=confirmations)
    tx.confirmations = confirmations
    if confirmations >= chain.confirmations:
        final = S.FINALIZED if int(receipt["status"]) == 1 else S.FAILED
        _to(
            tx,
            final,
            {
                "confirmations": confirmations,
                "required": chain.confirmations,
                "block_hash": block_hash,
                "status": int(receipt["status"]),
            },
        )


def _keep_in_mempool(
    w3: Any, chain: EvmChain, newest: ChainTransaction, txs, result: Track, *, now
) -> ChainTransaction:
    """The newest transaction (the one that pays most) must be known to the network: seen ->
    PENDING; signed but never handed over, gone from the mempool, or not seen within the
    broadcast window -> its stored bytes again."""
    if newest.state == S.CREATED:
        newest = sign_stored(newest, signer_of_tx(newest))
    seen = _rpc("transaction", client.transaction_of, w3, newest.tx_hash)
    if seen is not None:
        if newest.state in (S.SIGNED, S.BROADCAST):
            _to(newest, S.PENDING, {"seen": "mempool"})
        return newest
    window = timedelta(seconds=chain.broadcast_window_seconds)
    if newest.state == S.BROADCAST and newest.broadcast_at and now - newest.broadcast_at < window:
        result.detail["waiting_for"] = "the network to see the transaction"
        return newest
    reason = {
        S.SIGNED: "signed, never handed to a node",
        S.BROADCAST: "not seen within the broadcast window",
        S.PENDING: "left the mempool",
    }[TxState(newest.state)]
    try:
        sent = send_stored(w3, newest)
    except Exception as exc:
        if client.is_network_error(exc):
            raise TransientError(f"re-broadcast: {exc}"[:500]) from exc
        raise
    evidence = {"rebroadcast": reason, "rpc": sent.outcome, "message": sent.message}
    if sent.outcome in ("sent", "known"):
        if newest.state == S.BROADCAST:
            chain_transaction_record(
                chain_transaction_id=newest.pk,
                actor=ACTOR,
                evidence=evidence,
                fields={"broadcast_at": timezone.now()},
            )
        else:
            _to(newest, S.BROADCAST, evidence)
        result.detail["rebroadcast"] = newest.tx_hash
        if reason == "left the mempool":
            result.attention = result.attention or {
                "reason": "dropped",
                "message": f"{newest.tx_hash} left the mempool: re-broadcast from its stored bytes",
            }
        return newest
    if sent.outcome == "nonce_used":
        # No receipt for any of ours a moment ago; asked again now (a node behind a load
        # balancer may lag): if still none, the nonce went to a transaction that is not ours.
        for tx in txs:
            if tx.tx_hash and _rpc("receipt", client.receipt_of, w3, tx.tx_hash) is not None:
                result.detail["waiting_for"] = "the receipt of a transaction just mined"
                return newest
        for tx in txs:
            if tx.state in LIVE_TX_STATES:
                _to(tx, S.DROPPED, {"nonce_used_by_another_transaction": sent.message})
        result.status = "dropped"
        result.attention = {
            "reason": "dropped",
            "message": f"nonce {newest.nonce} of {newest.sender} was used by a transaction "
            "QTG did not sign",
        }
        return newest
    chain_transaction_record(
        chain_transaction_id=newest.pk, actor=ACTOR, evidence={"broadcast_refused": sent.message}
    )
    result.detail["broadcast_refused"] = sent.message
    if not client.says(sent.message, client.UNDERPRICED):
        result.attention = {
            "reason": "broadcast_refused",
            "message": f"the node refuses {newest.tx_hash}: {sent.message}",
        }
    return newest


def signer_of_tx(tx: ChainTransaction) -> Signer:
    chain = _chain_of(tx)
    for account in chain.accounts.values():
        if account.address.lower() == tx.sender.lower():
            transfer = Transfer(chain, account.address, account.name, "", "", 0, "")
            return signer_of(transfer)
    raise DeterministicError(f"no configured account of chain {chain.name} is {tx.sender}")


def _maybe_bump(w3: Any, chain: EvmChain, newest: ChainTransaction, result: Track, *, now) -> None:
    """A fee bump of a transaction stuck longer than ``replace_after_seconds``: same nonce,
    both fees raised by the chain's rule (at least 10 %), a new transaction that competes
    with the old. Only the sender's lowest unconfirmed nonce is bumped (bumping N while N-1
    is stuck is pointless); above the fee cap, nothing is sent and an operator is told."""
    since = newest.pending_at or newest.signed_at or newest.created_at
    if now - since < timedelta(seconds=chain.replace_after_seconds):
        return
    lower = (
        ChainTransaction.objects.filter(
            chain=newest.chain,
            sender=newest.sender,
            nonce__lt=newest.nonce,
            state__in=[S.SIGNED, S.BROADCAST, S.PENDING],
        )
        .order_by("nonce")
        .values_list("nonce", flat=True)
        .first()
    )
    if lower is not None:
        result.detail["waiting_for_nonce"] = lower
        return
    old_max, old_tip = int(newest.max_fee_per_gas), int(newest.max_priority_fee_per_gas)
    base = int(_rpc("latest block", w3.eth.get_block, "latest")["baseFeePerGas"])
    new_tip = chain.bumped(old_tip)
    new_max = max(chain.bumped(old_max), 2 * base + new_tip)
    if new_max > chain.max_fee_wei:
        if chain.bumped(old_max) > chain.max_fee_wei or chain.max_fee_wei < base + new_tip:
            result.attention = {
                "reason": "fee_cap",
                "message": f"{newest.tx_hash} is stuck and a fee bump would pass the cap of "
                f"{chain.max_fee_wei / GWEI} gwei on {chain.name}",
                "max_fee_wei": old_max,
                "cap_wei": chain.max_fee_wei,
                "base_fee_wei": base,
            }
            result.detail["fee_cap"] = True
            return
        new_max = chain.max_fee_wei
    unsigned = {
        **newest.unsigned,
        "maxFeePerGas": str(new_max),
        "maxPriorityFeePerGas": str(new_tip),
    }
    replacement = chain_transaction_create(
        chain=newest.chain,
        sender=newest.sender,
        nonce=newest.nonce,
        unsigned=unsigned,
        actor=ACTOR,
        movement_id=newest.movement_id,
        node_id=newest.node_id,
        replaces=newest,
        gas_limit=newest.gas_limit,
        max_fee_per_gas=new_max,
        max_priority_fee_per_gas=new_tip,
        evidence={
            "fee_bump": {"replaces": newest.tx_hash, "old_max_fee": old_max, "base_fee": base},
            "stuck_since": since.isoformat(),
        },
    )
    replacement = sign_stored(replacement, signer_of_tx(replacement))
    try:
        sent = send_stored(w3, replacement)
    except Exception as exc:
        if client.is_network_error(exc):
            return  # stored and signed: the next look broadcasts it
        raise
    if sent.outcome in ("sent", "known"):
        _to(replacement, S.BROADCAST, {"rpc": sent.outcome, "fee_bump_of": newest.tx_hash})
    else:
        chain_transaction_record(
            chain_transaction_id=replacement.pk,
            actor=ACTOR,
            evidence={"broadcast_refused": sent.message},
        )
    result.detail["fee_bump"] = {"replacement": replacement.tx_hash, "max_fee_wei": new_max}


def revert_reason(w3: Any, tx: ChainTransaction) -> str | None:
    """Why a mined transaction reverted: replayed as ``eth_call`` on the state its block
    started from, else (the revert depended on a transaction earlier in the same block) on
    the state after the block. None if neither replay reverts."""
    unsigned = _unsigned_for_signing(tx.unsigned)
    call = {
        "from": tx.sender,
        "to": unsigned["to"],
        "data": unsigned.get("data", "0x"),
        "value": unsigned.get("value", 0),
        "gas": unsigned["gas"],
    }
    block = int(tx.block_number)
    for at, note in ((block - 1, ""), (block, f" (replayed on the state after block {block})")):
        try:
            w3.eth.call(call, block_identifier=at)
        except Exception as exc:
            return (str(getattr(exc, "message", "") or exc) + note)[:500]
    return None


def moved(w3: Any, receipt: Any, transfer: Transfer) -> dict[str, Any] | None:
    """The transfer the receipt shows (recipient, units), checked against what was asked:
    None when it matches, else what was found."""
    if not transfer.token:
        tx = w3.eth.get_transaction(receipt["transactionHash"])
        found = {"to": tx["to"], "units": int(tx["value"])}
        ok = (tx["to"] or "").lower() == transfer.recipient.lower() and found[
            "units"
        ] == transfer.units
        return None if ok else found
    for log in receipt["logs"]:
        if (log["address"] or "").lower() != transfer.token.lower() or len(log["topics"]) != 3:
            continue
        if log["topics"][0].to_0x_hex() != TRANSFER_TOPIC:
            continue
        to = "0x" + log["topics"][2].hex()[-40:]
        sender = "0x" + log["topics"][1].hex()[-40:]
        units = int.from_bytes(bytes(log["data"]), "big")
        if (
            to.lower() == transfer.recipient.lower()
            and sender.lower() == transfer.sender.lower()
            and units == transfer.units
        ):
            return None
    return {"logs": len(receipt["logs"]), "expected_units": transfer.units}

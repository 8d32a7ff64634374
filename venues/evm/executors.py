"""The EVM executors: ``evm_transfer`` (native coin or ERC-20, signed by QTG) and the real
``chain_tx_observe`` (an upstream node's transaction watched to the chain's finality).

They never write node state: the worker maps what they return. A node reaches COMPLETED only
when one of its transactions is FINALIZED by the chain's policy (``venues/chains.yaml``).
"""

from decimal import Decimal
from typing import Any

from django.core.exceptions import ImproperlyConfigured

from movements.executors.base import (
    DeterministicError,
    ExecutionContext,
    Executor,
    NodeSpec,
    Observation,
    ObservedStatus,
    Prepared,
    RecoveredOutcome,
    Recovery,
    Signed,
    Submitted,
    TransientError,
)
from movements.executors.registry import register
from venues.evm import client
from venues.evm.config import EvmChain, evm_chain
from venues.evm.transfers import (
    Track,
    Transfer,
    broadcast_transfer,
    moved,
    node_transactions,
    prepare_transfer,
    resolve_transfer,
    sign_stored,
    signer_of,
    track,
    transaction_by_hash,
)
from venues.models import TxState

S = TxState


def _chain(config: dict[str, Any]) -> EvmChain:
    name = str(config.get("chain") or "")
    try:
        return evm_chain(name)
    except LookupError as exc:
        raise DeterministicError(str(exc)) from None
    except ImproperlyConfigured as exc:
        raise DeterministicError(f"chain {name}: {exc}") from None


def _transfer(chain: EvmChain, *, asset, amount, source, destination, config) -> Transfer:
    try:
        return resolve_transfer(
            chain,
            asset=asset,
            amount=amount,
            source=str(config.get("from") or source),
            destination=str(config.get("to") or destination),
        )
    except (LookupError, ValueError) as exc:
        raise DeterministicError(str(exc)) from None


def _ctx_transfer(ctx: ExecutionContext) -> Transfer:
    chain = _chain(ctx.config)
    return _transfer(
        chain,
        asset=ctx.asset,
        amount=ctx.amount,
        source=ctx.source,
        destination=ctx.destination,
        config=ctx.config,
    )


@register("evm_transfer", provider="venues")
class EvmTransfer(Executor):
    """Send ``amount`` of ``asset`` (the chain's native coin or a configured ERC-20) from a
    configured account to an address or another configured account."""

    needs_upstream = False
    external_ref_name = "transaction hash"

    def visibility_window(self, ctx: ExecutionContext) -> float:
        try:
            return _chain(ctx.config).broadcast_window_seconds
        except DeterministicError:
            return self.visibility_seconds

    def validate(self, spec: NodeSpec) -> None:
        chain = _chain(spec.config)
        _transfer(
            chain,
            asset=spec.asset,
            amount=spec.amount,
            source=spec.source,
            destination=spec.destination,
            config=spec.config,
        )

    def prepare(self, ctx: ExecutionContext) -> Prepared:
        transfer = _ctx_transfer(ctx)
        tx, reused = prepare_transfer(ctx, transfer)
        return Prepared(
            {
                "chain": transfer.chain.name,
                "chain_tx_id": tx.pk,
                "nonce": tx.nonce,
                "sender": transfer.sender,
                "recipient": transfer.recipient,
                "units": str(transfer.units),
                "reused_transaction": reused,
            }
        )

    def sign(self, ctx: ExecutionContext) -> Signed:
        transfer = _ctx_transfer(ctx)
        txs = node_transactions(ctx.node_id)
        if not txs:
            raise TransientError("nothing prepared to sign yet")
        original = txs[0]
        reused = original.state != S.CREATED
        tx = sign_stored(original, signer_of(transfer))
        return Signed(
            tx.raw_signed, {"tx_hash": tx.tx_hash, "nonce": tx.nonce, "re_used_bytes": reused}
        )

    def submit(self, ctx: ExecutionContext) -> Submitted:
        chain = _chain(ctx.config)
        if not ctx.signed_payload:
            raise DeterministicError("no signed transaction to broadcast")
        tx_hash = client.Web3.keccak(hexstr=ctx.signed_payload).to_0x_hex()
        tx = transaction_by_hash(chain.name, tx_hash)
        if tx is None or tx.raw_signed != ctx.signed_payload:
            raise DeterministicError(f"the signed payload {tx_hash} is not a stored transaction")
        sent = broadcast_transfer(tx)
        return Submitted(
            tx.tx_hash,
            detail={"tx_hash": tx.tx_hash, "chain": chain.name, "nonce": tx.nonce, **_rpc(sent)},
        )

    def observe(self, ctx: ExecutionContext) -> Observation:
        transfer = _ctx_transfer(ctx)
        return _observation(ctx, track(ctx.node_id), transfer)

    def recover(self, ctx: ExecutionContext) -> Recovery:
        transfer = _ctx_transfer(ctx)
        txs = node_transactions(ctx.node_id)
        if not txs or all(tx.state == S.CREATED for tx in txs):
            return Recovery(
                RecoveredOutcome.FAILED,
                detail={"finding": "nothing was signed, so nothing was broadcast"},
            )
        result = track(ctx.node_id)
        original = txs[0].tx_hash
        observation = _observation(ctx, result, transfer)
        detail = {"finding": result.status, **observation.detail}
        if observation.status == ObservedStatus.COMPLETED:
            return Recovery(RecoveredOutcome.COMPLETED, observation.external_ref, detail)
        if observation.status == ObservedStatus.FAILED:
            return Recovery(RecoveredOutcome.FAILED, observation.external_ref, detail)
        if result.status == "dropped":
            # Its nonce was used by a transaction QTG did not sign: this transfer can never
            # happen (the worker still waits out the visibility window and asks twice).
            return Recovery(RecoveredOutcome.FAILED, original, detail)
        if result.status == "waiting" and (
            result.winner is not None or "broadcast_refused" not in result.detail
        ):
            # The network has it (mined, in the mempool, or just handed the stored bytes).
            return Recovery(RecoveredOutcome.SUBMITTED, original, detail)
        return Recovery(RecoveredOutcome.UNRESOLVED, original, detail)


def _rpc(sent: Any) -> dict[str, Any]:
    return {"rpc": sent.outcome} if sent.outcome != "sent" else {}


def _observation(ctx: ExecutionContext, result: Track, transfer: Transfer) -> Observation:
    detail = result.summary()
    original = result.original.tx_hash if result.original is not None else ctx.external_ref
    if result.reorg:
        return Observation(ObservedStatus.REORG, ctx.external_ref or original, detail)
    if result.status == "finalized":
        winner = result.winner
        chain = transfer.chain
        mismatch = moved(client.web3_for(chain), result.receipt, transfer)
        if mismatch is not None:
            detail["attention"] = {
                "reason": "venue",
                "message": f"{winner.tx_hash} did not move what was asked: {mismatch}",
            }
            return Observation(ObservedStatus.FAILED, winner.tx_hash, detail)
        replaced = winner.tx_hash != (ctx.external_ref or original)
        if replaced:
            detail["replaced"] = ctx.external_ref or original
        detail["fee_paid_wei"] = str(winner.fee_paid) if winner.fee_paid is not None else None
        return Observation(ObservedStatus.COMPLETED, winner.tx_hash, detail, replaced=replaced)
    if result.status == "failed":
        detail["finding"] = "the transaction reverted (its fee is spent, nothing moved)"
        return Observation(ObservedStatus.FAILED, result.winner.tx_hash, detail)
    if result.status == "dropped":
        return Observation(ObservedStatus.UNKNOWN, ctx.external_ref or original, detail)
    return Observation(ObservedStatus.PENDING, ctx.external_ref or original, detail)


@register("evm_transfer_observe", provider="venues")
class ChainTxObserve(Executor):
    """Watch an upstream node's transaction reach the chain's finality: its receipt's
    status, its confirmations (head - inclusion + 1) and, for an ``evm_transfer``, that it
    moved the amount to the recipient (read from the receipt and its logs)."""

    def validate(self, spec: NodeSpec) -> None:
        _chain(spec.config)

    def visibility_window(self, ctx: ExecutionContext) -> float:
        try:
            return _chain(ctx.config).broadcast_window_seconds
        except DeterministicError:
            return self.visibility_seconds

    def observe(self, ctx: ExecutionContext) -> Observation:
        chain = _chain(ctx.config)
        key = str(ctx.config.get("source_node") or "")
        upstream = ctx.upstream.get(key)
        if upstream is None:
            raise DeterministicError(f"node {ctx.node_key}: no upstream {key!r} in the plan")
        tx_hash = upstream.external_ref or str(upstream.result.get("tx_hash") or "")
        if not tx_hash:
            return Observation(ObservedStatus.PENDING, detail={"waiting_for": "transaction"})
        w3 = client.web3_for(chain)
        try:
            receipt = client.receipt_of(w3, tx_hash)
            head = w3.eth.block_number
        except Exception as exc:
            if client.is_network_error(exc) or client.rpc_message(exc):
                raise TransientError(f"receipt of {tx_hash}: {exc}"[:500]) from exc
            raise
        seen_block = str(ctx.result.get("block_hash") or "")
        if receipt is None:
            if seen_block:
                evidence = {"tx_hash": tx_hash, "old_block_hash": seen_block, "head": head}
                return Observation(
                    ObservedStatus.REORG,
                    tx_hash,
                    {
                        **evidence,
                        "block_hash": "",
                        "attention": {
                            "reason": "reorg",
                            "message": f"{tx_hash} left the canonical chain of {chain.name}",
                        },
                    },
                )
            return Observation(ObservedStatus.PENDING, tx_hash, {"waiting_for": "a receipt"})
        block_hash = receipt["blockHash"].to_0x_hex()
        confirmations = max(0, head - int(receipt["blockNumber"]) + 1)
        detail: dict[str, Any] = {
            "tx_hash": tx_hash,
            "block_number": int(receipt["blockNumber"]),
            "block_hash": block_hash,
            "confirmations": confirmations,
            "required": chain.confirmations,
            "status": int(receipt["status"]),
        }
        if seen_block and seen_block != block_hash:
            detail["attention"] = {
                "reason": "reorg",
                "message": f"{tx_hash} moved from block {seen_block} to {block_hash}",
            }
            detail["old_block_hash"] = seen_block
            return Observation(ObservedStatus.REORG, tx_hash, detail)
        if confirmations < chain.confirmations:
            return Observation(ObservedStatus.PENDING, tx_hash, detail)
        if int(receipt["status"]) != 1:
            return Observation(ObservedStatus.FAILED, tx_hash, detail)
        if upstream.executor == "evm_transfer":
            transfer = _transfer(
                chain,
                asset=ctx.asset,
                amount=Decimal(ctx.amount),
                source=ctx.source,
                destination=ctx.destination,
                config=upstream.config,
            )
            mismatch = moved(w3, receipt, transfer)
            if mismatch is not None:
                detail["mismatch"] = mismatch
                return Observation(ObservedStatus.FAILED, tx_hash, detail)
        return Observation(ObservedStatus.COMPLETED, tx_hash, detail)


# The chain nodes of the other templates (``chain_tx_observe``, also provided by the sandbox)
# run on a configured chain where the deployment chooses the venues (``QTG_VENUES``).
@register("chain_tx_observe", provider="venues")
class ChainTxObserveOnChain(ChainTxObserve):
    """``chain_tx_observe`` of the existing templates, on a configured EVM chain."""

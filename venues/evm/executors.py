"""The EVM executors: ``evm_transfer`` (native coin or ERC-20, signed by QTG: a
``venues.evm.tx.ChainAction``) and the real ``chain_tx_observe`` (an upstream node's
transaction watched to the chain's finality).

They never write node state: the worker maps what they return. A node reaches COMPLETED only
when one of its transactions is FINALIZED by the chain's policy (``venues/chains.yaml``).
"""

from contextlib import suppress
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.utils import timezone

from movements.executors.base import (
    DeterministicError,
    ExecutionContext,
    Executor,
    NodeSpec,
    Observation,
    ObservedStatus,
    TransientError,
)
from movements.executors.registry import register
from venues.evm import client
from venues.evm.config import EvmChain, evm_chain
from venues.evm.endpoints import Sighting, sighting_elsewhere
from venues.evm.facts import check_decimals
from venues.evm.tx import (
    ACTOR,
    ChainAction,
    Track,
    Transfer,
    finalized_block,
    head_and_receipts,
    moved,
    resolve_transfer,
    transaction_by_hash,
)
from venues.models import TxState
from venues.transactions import chain_transaction_transition

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
class EvmTransfer(ChainAction):
    """Send ``amount`` of ``asset`` (the chain's native coin or a configured ERC-20) from a
    configured account to an address or another configured account."""

    needs_upstream = False

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
        # A chain that does not answer now is checked again before a nonce is taken.
        with suppress(TransientError):
            check_decimals(chain, chain.asset(spec.asset))

    def call(self, ctx: ExecutionContext) -> Transfer:
        return _ctx_transfer(ctx)

    def checked(self, ctx: ExecutionContext, look: Track, observation: Observation) -> Observation:
        """A final transfer must have moved what was asked (read from its receipt)."""
        if observation.status != ObservedStatus.COMPLETED:
            return observation
        transfer = self.call(ctx)
        mismatch = moved(client.web3_for(transfer.chain), look.receipt, transfer)
        if mismatch is None:
            return observation
        detail = {
            **observation.detail,
            "attention": {
                "reason": "venue",
                "message": f"{look.winner.tx_hash} did not move what was asked: {mismatch}",
            },
        }
        return Observation(ObservedStatus.FAILED, look.winner.tx_hash, detail)


@register("evm_transfer_observe", provider="venues")
class ChainTxObserve(Executor):
    """Watch an upstream node's transaction reach the chain's finality: its receipt's
    status, its confirmations (head - inclusion + 1) and, for an ``evm_transfer``, that it
    moved the amount to the recipient (read from the receipt and its logs)."""

    def validate(self, spec: NodeSpec) -> None:
        _chain(spec.config)

    @property
    def stuck_after_seconds(self) -> float:
        """The usual wait plus the longest ``post_final_watch`` of the configured chains: a
        node watching a final transaction is not stuck."""
        from django.conf import settings

        from venues.evm.config import evm_chains

        try:
            watches = [chain.post_final_watch for chain in evm_chains().values()]
        except ImproperlyConfigured:
            watches = []
        return float(settings.QTG_STUCK_AFTER_SECONDS) + max(watches, default=0.0)

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
        # The receipt, then the head its confirmations are counted from: one round trip.
        tip, [receipt] = head_and_receipts(w3, [tx_hash], head_last=True)
        head = tip.number
        seen_block = str(ctx.result.get("block_hash") or "")
        final_since = str(ctx.result.get("final_since") or "")
        if final_since and (receipt is None or receipt["blockHash"].to_0x_hex() != seen_block):
            asked = sighting_elsewhere(chain, tx_hash, seen_block)
            if asked.seen is None:
                return final_reorg(w3, chain, ctx, tx_hash, receipt, head=head, asked=asked)
            return _still_seen(tx_hash, asked)
        if receipt is None:
            if seen_block:
                asked = sighting_elsewhere(chain, tx_hash, seen_block)
                if asked.seen is not None:
                    return _still_seen(tx_hash, asked)
                evidence = {
                    "tx_hash": tx_hash,
                    "old_block_hash": seen_block,
                    "head": head,
                    **asked.evidence(),
                }
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
            "required": chain.finality.describe(),
            "status": int(receipt["status"]),
        }
        if seen_block and seen_block != block_hash:
            detail["attention"] = {
                "reason": "reorg",
                "message": f"{tx_hash} moved from block {seen_block} to {block_hash}",
            }
            detail["old_block_hash"] = seen_block
            return Observation(ObservedStatus.REORG, tx_hash, detail)
        checkpoint = None
        if not chain.finality.depth or confirmations >= chain.finality.depth:
            checkpoint = finalized_block(w3, chain, head=tip)
            detail["finalized_block"] = checkpoint
        if (chain.finality.depth and confirmations < chain.finality.depth) or not (
            chain.finality.reached(
                number=int(receipt["blockNumber"]),
                head=head,
                finalized=checkpoint["number"] if checkpoint else None,
            )
        ):
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
        _final_again(chain, tx_hash, detail)
        return _watched(chain, ctx, tx_hash, detail)


def _still_seen(tx_hash: str, asked: Sighting) -> Observation:
    """The primary's look did not serve ``tx_hash`` in its block; an endpoint (the primary's
    second look among them) still does: no reorg is concluded, the next look decides."""
    return Observation(
        ObservedStatus.PENDING,
        tx_hash,
        {"waiting_for": "the primary endpoint to serve the receipt", **asked.evidence()},
    )


def _final_again(chain: EvmChain, tx_hash: str, detail: dict[str, Any]) -> None:
    """QTG's record of a transaction a final reorg walked back, final again (re-included and
    final by the policy): PENDING -> CONFIRMED -> FINALIZED with this look's evidence, and a
    new ledger entry (the node that signed it has ended: nothing else looks at it)."""
    tx = transaction_by_hash(chain.name, tx_hash)
    if (
        tx is None
        or tx.state != S.PENDING
        or not tx.events.filter(evidence__has_key="final_reorg").exists()
    ):
        return
    evidence = {"walked_back": "final again after a final reorg", **detail}
    fields = {
        "block_number": detail["block_number"],
        "block_hash": detail["block_hash"],
        "confirmations": detail["confirmations"],
    }
    for state in (S.CONFIRMED, S.FINALIZED):
        tx = chain_transaction_transition(
            chain_transaction_id=tx.pk,
            to_state=state,
            actor=ACTOR,
            expected=[tx.state],
            evidence=evidence,
            fields=fields,
        )


def _watched(chain: EvmChain, ctx: ExecutionContext, tx_hash: str, detail: dict[str, Any]):
    """Final by the policy: COMPLETED once the chain's ``post_final_watch`` has passed since
    finality was first seen; until then the node keeps looking (the movement is not
    COMPLETED, its reservation stays HELD: COMPLETED has no way back in the spec's table,
    so the watch comes before it)."""
    now = timezone.now()
    since = ctx.result.get("final_since")
    first = datetime.fromisoformat(since) if since else now
    detail["final_since"] = first.isoformat()
    until = first + timedelta(seconds=chain.post_final_watch)
    if now < until:
        detail["waiting_for"] = f"the post-final watch of {chain.name} (until {until.isoformat()})"
        detail["watch_until"] = until.isoformat()
        return Observation(ObservedStatus.PENDING, tx_hash, detail)
    detail["watched_seconds"] = chain.post_final_watch
    return Observation(ObservedStatus.COMPLETED, tx_hash, detail)


def final_reorg(
    w3: Any,
    chain: EvmChain,
    ctx: ExecutionContext,
    tx_hash: str,
    receipt: Any,
    *,
    head: int,
    asked: Sighting,
) -> Observation:
    """A transaction final by the policy is gone from the canonical chain (or in another
    block) while it is watched: the chain contradicted its finality. QTG's record of it walks
    back FINALIZED -> PENDING (its ledger entry compensated, append-only), an operator is
    paged (``final_reorg``) and the node goes UNKNOWN, so the movement reaches
    MANUAL_INTERVENTION with its reservation HELD."""
    evidence: dict[str, Any] = {
        "tx_hash": tx_hash,
        "old_block_hash": ctx.result.get("block_hash"),
        "old_block_number": ctx.result.get("block_number"),
        "final_since": ctx.result.get("final_since"),
        "head": head,
        "now_in_block": receipt["blockHash"].to_0x_hex() if receipt is not None else None,
        "policy": chain.finality.describe(),
        **asked.evidence(),
    }
    with suppress(TransientError):
        evidence["finalized_block"] = _checkpoint(w3)
    tx = transaction_by_hash(chain.name, tx_hash)
    if tx is not None and tx.state == S.FINALIZED:
        chain_transaction_transition(
            chain_transaction_id=tx.pk,
            to_state=S.PENDING,
            actor=ACTOR,
            expected=[S.FINALIZED],
            evidence={"final_reorg": evidence},
            fields={"block_number": None, "block_hash": "", "confirmations": 0},
        )
        evidence["chain_transaction"] = tx.pk
    where = "is in another block" if receipt is not None else "left the canonical chain"
    message = (
        f"{tx_hash}, final on {chain.name} by the policy ({chain.finality.describe()}) at "
        f"block {evidence['old_block_number']}, {where}: the money may not have moved; "
        "its ledger entry is compensated"
    )
    return Observation(
        ObservedStatus.REORG,
        tx_hash,
        {
            **evidence,
            "block_hash": "",
            "final_since": "",
            "final_reorg": True,
            "attention": {"reason": "final_reorg", "message": message},
        },
    )


def _checkpoint(w3: Any) -> dict[str, Any]:
    try:
        block = w3.eth.get_block("finalized")
    except Exception as exc:
        if client.is_network_error(exc) or client.rpc_message(exc):
            raise TransientError(f"finalized block: {exc}"[:500]) from exc
        raise
    return {"number": int(block["number"]), "hash": block["hash"].to_0x_hex()}


# The chain nodes of the other templates (``chain_tx_observe``, also provided by the sandbox)
# run on a configured chain where the deployment chooses the venues (``QTG_VENUES``).
@register("chain_tx_observe", provider="venues")
class ChainTxObserveOnChain(ChainTxObserve):
    """``chain_tx_observe`` of the existing templates, on a configured EVM chain."""

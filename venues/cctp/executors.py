"""The ``cctp`` template's executors on real chains (registered for provider ``venues``).

- ``cctp_attestation_observe``: asks Iris for the attestation of the burn node's transaction
  (backoff and ``Retry-After`` through :class:`TransientError`), and completes only when the
  attested message is the one the burn emitted, moves exactly the node's amount to the node's
  recipient, and the burn is still in the source chain's canonical history.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from movements.executors.base import (
    DeterministicError,
    ExecutionContext,
    Executor,
    NodeSpec,
    Observation,
    ObservedStatus,
    Upstream,
)
from movements.executors.registry import register
from venues.cctp import chain as cctp_chain_io
from venues.cctp.config import CctpChain, cctp_chain, iris_url, to_units
from venues.cctp.iris import IrisClient, IrisMessage

PROVIDER = "venues"


def _chain(name: str) -> CctpChain:
    try:
        return cctp_chain(name)
    except LookupError as exc:
        raise DeterministicError(str(exc)) from None


def _upstream(ctx: ExecutionContext, *, executor: str, key: str = "") -> Upstream:
    if key and key in ctx.upstream:
        return ctx.upstream[key]
    for node in ctx.upstream.values():
        if node.executor == executor:
            return node
    raise DeterministicError(f"node {ctx.node_key}: no upstream {key or executor} in the plan")


def validate_amount(spec: NodeSpec) -> None:
    if not isinstance(spec.amount, Decimal) or spec.amount <= 0:
        raise DeterministicError(f"amount must be a positive decimal, got {spec.amount!r}")
    if spec.asset != "USDC":
        raise DeterministicError(f"CCTP moves USDC only, not {spec.asset}")
    try:
        to_units(spec.amount)
    except ValueError as exc:
        raise DeterministicError(str(exc)) from None


@register("cctp_attestation_observe", provider=PROVIDER)
class CctpAttestationObserve(Executor):
    """Wait for Circle's attestation of the burn; complete only on a canonical, matching burn."""

    external_ref_name = "burn transaction hash"

    def validate(self, spec: NodeSpec) -> None:
        validate_amount(spec)
        _chain(str(spec.config.get("chain") or ""))

    def observe(self, ctx: ExecutionContext) -> Observation:
        source = _chain(str(ctx.config.get("chain") or ""))
        burn = _upstream(ctx, executor="cctp_burn", key=str(ctx.config.get("source_node") or ""))
        tx_hash = burn.external_ref
        if not tx_hash:
            return Observation(ObservedStatus.PENDING, detail={"waiting_for": "burn"})
        detail: dict[str, Any] = {"burn_tx_hash": tx_hash, "source_domain": source.domain}
        with IrisClient(iris_url()) as iris:
            messages = iris.messages(source.domain, tx_hash)
        if not messages:
            return Observation(
                ObservedStatus.PENDING, tx_hash, {**detail, "iris_status": "not_found"}
            )
        if len(messages) != 1:
            return Observation(
                ObservedStatus.FAILED,
                tx_hash,
                {
                    **detail,
                    "finding": f"the burn emitted {len(messages)} CCTP messages, not one",
                    "attention": {
                        "reason": "venue",
                        "message": "the burn transaction carries several CCTP messages",
                    },
                },
            )
        (found,) = messages
        if not found.complete:
            return Observation(ObservedStatus.PENDING, tx_hash, {**detail, **found.as_detail()})
        return self._attested(ctx, source, tx_hash, found, detail)

    def _attested(
        self,
        ctx: ExecutionContext,
        source: CctpChain,
        tx_hash: str,
        found: IrisMessage,
        detail: dict[str, Any],
    ) -> Observation:
        detail = {**detail, **found.as_detail()}
        burn = cctp_chain_io.burn_on_chain(source, tx_hash)
        if burn is None:
            # Attested, yet the chain no longer has the burn: a reorg deeper than the
            # attester's confirmations. Minting on it would mint money that was never burned.
            return Observation(
                ObservedStatus.REORG,
                tx_hash,
                {
                    **detail,
                    "finding": "attested, but the burn is not in the canonical chain",
                    "attention": {
                        "reason": "reorg",
                        "message": f"the burn {tx_hash} left the canonical chain after Iris "
                        "attested it: no mint until it is back",
                    },
                },
            )
        detail |= {"burn_block_number": burn.block_number, "burn_block_hash": burn.block_hash}
        problem = cctp_chain_io.mismatch(ctx, source, burn, found.message)
        if problem:
            return Observation(
                ObservedStatus.FAILED,
                tx_hash,
                {
                    **detail,
                    "finding": problem,
                    "attention": {"reason": "venue", "message": problem},
                },
            )
        return Observation(ObservedStatus.COMPLETED, tx_hash, detail)

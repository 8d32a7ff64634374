"""Executors for the sandbox venues: a simulated exchange, chain, signer and CCTP. They
register, when the app is ready, under the names the route templates use; a deployment with
real venues leaves this app out of INSTALLED_APPS (or chooses per name in
``settings.QTG_EXECUTORS``).
"""

from collections.abc import Callable
from datetime import timedelta
from decimal import ROUND_DOWN, Decimal
from typing import Any, TypeVar

from django.conf import settings

from movements.executors.base import (
    AmbiguousError,
    DeterministicError,
    ExecutionContext,
    Executor,
    Observation,
    ObservedStatus,
    Prepared,
    RecoveredOutcome,
    Recovery,
    Signed,
    Submitted,
    Upstream,
)
from movements.executors.registry import register
from sandbox import venues
from sandbox.errors import VenueDisabled, VenueRejected, VenueTimeout
from sandbox.faults import UnknownFault, parse_fault
from sandbox.finality import chain_finality

T = TypeVar("T")


def _venue_call(fn: Callable[..., T], /, **kwargs: Any) -> T:
    """Call the sandbox and translate its answers into the executor error taxonomy."""
    try:
        return fn(**kwargs)
    except (VenueRejected, VenueDisabled) as exc:
        raise DeterministicError(exc.message, evidence=exc.evidence) from exc
    except VenueTimeout as exc:
        raise AmbiguousError(exc.message, evidence=exc.evidence) from exc


def _fault(ctx: ExecutionContext):
    try:
        return parse_fault(ctx.fault)
    except UnknownFault as exc:
        raise DeterministicError(str(exc)) from None


def _venues():
    _venue_call(venues.ensure_enabled)
    return venues


def _require_config(ctx: ExecutionContext, *names: str) -> None:
    missing = [name for name in names if not ctx.config.get(name)]
    if missing:
        raise DeterministicError(f"node {ctx.node_key}: config lacks {', '.join(missing)}")


def _require_chain(chain: str) -> None:
    try:
        chain_finality(chain)
    except LookupError as exc:
        raise DeterministicError(str(exc)) from None


def _require_amount(ctx: ExecutionContext) -> None:
    if not isinstance(ctx.amount, Decimal) or ctx.amount <= 0:
        raise DeterministicError(f"amount must be a positive decimal, got {ctx.amount!r}")


# The smallest unit an amount is split into (an 18-decimal token's).
SPLIT_UNIT = Decimal("1e-18")


def _leg_amount(ctx: ExecutionContext) -> Decimal:
    """The amount this node moves: the whole amount, or with ``part: "k/n"`` in its config the
    k-th of n equal parts, the last taking what rounding left, so the parts add up exactly."""
    part = str(ctx.config.get("part") or "")
    if not part:
        return ctx.amount
    k, _, n = part.partition("/")
    if not (k.isdigit() and n.isdigit() and 1 <= int(k) <= int(n)):
        raise DeterministicError(f"node {ctx.node_key}: part must be k/n, got {part!r}")
    share = (ctx.amount / int(n)).quantize(SPLIT_UNIT, rounding=ROUND_DOWN)
    if int(k) < int(n):
        return share
    return ctx.amount - share * (int(n) - 1)


def _upstream(ctx: ExecutionContext, *, executor: str = "", key: str = "") -> Upstream:
    if key and key in ctx.upstream:
        return ctx.upstream[key]
    for node in ctx.upstream.values():
        if node.executor == executor:
            return node
    raise DeterministicError(f"node {ctx.node_key}: no upstream {key or executor} in the plan")


def _reorg_or(ctx: ExecutionContext, status, pending: Observation) -> Observation:
    """A reorg is detected by the chain's reorg counter moving past what we last saw."""
    seen = int(ctx.result.get("reorg_count", 0) or 0)
    if status.reorg_count > seen:
        return Observation(
            ObservedStatus.REORG,
            status.tx_hash,
            {
                **status.as_dict(),
                "reorg": True,
                "previous_block_hash": ctx.result.get("block_hash", ""),
                "previous_confirmations": ctx.result.get("confirmations", 0),
            },
        )
    return pending


def _tx_hash_of(ctx: ExecutionContext, upstream: Upstream) -> str:
    """The on-chain transaction behind an upstream node ('' while it is not known yet)."""
    tx_hash = upstream.result.get("tx_hash") or ""
    if tx_hash:
        return tx_hash
    if upstream.executor == "cex_withdraw" and upstream.external_ref:
        venues = _venues()
        withdrawal = _venue_call(venues.withdrawal_status, withdrawal_id=upstream.external_ref)
        return withdrawal.tx_hash
    return upstream.external_ref if upstream.external_ref.startswith("0x") else ""


# --- exchange ---------------------------------------------------------------------------------


@register("cex_withdraw")
class CexWithdraw(Executor):
    """Withdraw from an exchange. The exchange's acceptance is final for this node (a
    sync-terminal submit); the following observe nodes watch the funds travel."""

    needs_upstream = False
    external_ref_name = "withdrawal id"
    call_timeout_seconds = 10.0

    def request_lifetime(self, ctx: ExecutionContext) -> float:
        # The simulated exchange refuses a request acted on past its validity (see submit).
        return settings.QTG_SANDBOX_REQUEST_VALIDITY_SECONDS

    def prepare(self, ctx: ExecutionContext) -> Prepared:
        _venues()
        _require_config(ctx, "venue", "to", "network")
        _require_chain(ctx.config["network"])
        _require_amount(ctx)
        _fault(ctx)
        return Prepared({"venue": ctx.config["venue"], "network": ctx.config["network"]})

    def submit(self, ctx: ExecutionContext) -> Submitted:
        venues = _venues()
        fault = _fault(ctx)
        amount = _leg_amount(ctx)
        deadline = ctx.fence(self.call_timeout(ctx))
        validity = timedelta(seconds=self.request_lifetime(ctx))
        withdrawal = _venue_call(
            venues.withdraw,
            venue=ctx.config["venue"],
            client_key=ctx.idempotency_key,
            asset=ctx.asset,
            amount=amount,
            address=ctx.config["to"],
            network=ctx.config["network"],
            fault=fault,
            valid_until=deadline + validity,
        )
        return Submitted(
            withdrawal.withdrawal_id,
            done=True,
            detail={
                "withdrawal_id": withdrawal.withdrawal_id,
                "venue": withdrawal.venue,
                "amount": str(withdrawal.amount),
            },
        )

    def recover(self, ctx: ExecutionContext) -> Recovery:
        venues = _venues()
        if not ctx.idempotency_key:
            return Recovery(RecoveredOutcome.UNRESOLVED, detail={"reason": "no idempotency key"})
        withdrawal = _venue_call(
            venues.withdrawal_by_key, venue=ctx.config["venue"], client_key=ctx.idempotency_key
        )
        if withdrawal is None:
            return Recovery(
                RecoveredOutcome.NOT_FOUND,
                detail={
                    "venue": ctx.config["venue"],
                    "idempotency_key": ctx.idempotency_key,
                    "finding": "the venue has no withdrawal with this key",
                },
            )
        return Recovery(
            RecoveredOutcome.COMPLETED,
            withdrawal.withdrawal_id,
            {
                "withdrawal_id": withdrawal.withdrawal_id,
                "idempotency_key": ctx.idempotency_key,
                "finding": "the venue has the withdrawal",
            },
        )


@register("cex_withdrawal_observe")
class CexWithdrawalObserve(Executor):
    """Watch the exchange process the withdrawal until it has broadcast the transfer."""

    def observe(self, ctx: ExecutionContext) -> Observation:
        venues = _venues()
        upstream = _upstream(ctx, key=ctx.config.get("source_node", ""), executor="cex_withdraw")
        withdrawal = _venue_call(
            venues.withdrawal_status, withdrawal_id=upstream.external_ref, fault=_fault(ctx)
        )
        detail = {
            "withdrawal_id": withdrawal.withdrawal_id,
            "status": withdrawal.status,
            "tx_hash": withdrawal.tx_hash,
        }
        status = {"SENT": ObservedStatus.COMPLETED, "FAILED": ObservedStatus.FAILED}.get(
            withdrawal.status, ObservedStatus.PENDING
        )
        return Observation(status, withdrawal.tx_hash or withdrawal.withdrawal_id, detail)


@register("cex_deposit_observe")
class CexDepositObserve(Executor):
    """Watch the deposit arrive: credited once its transaction is final on its network."""

    def observe(self, ctx: ExecutionContext) -> Observation:
        _require_config(ctx, "venue")
        observers = [n for n in ctx.upstream.values() if n.executor == "cex_withdrawal_observe"]
        if len(observers) <= 1:
            # The withdrawal observer already learnt the tx hash; otherwise ask the exchange.
            known = observers[0].result.get("tx_hash") if observers else ""
            tx_hash = known or _tx_hash_of(ctx, _upstream(ctx, executor="cex_withdraw"))
            return self._deposit(ctx, tx_hash)
        # Several withdrawals feed this deposit (a split): credited once every one of them is.
        hashes = [n.result.get("tx_hash") or "" for n in observers]
        if not all(hashes):
            return Observation(ObservedStatus.PENDING, detail={"waiting_for": "withdrawal txs"})
        credited = {}
        for tx_hash in hashes:
            observation = self._deposit(ctx, tx_hash)
            if observation.status != ObservedStatus.COMPLETED:
                return observation
            credited[tx_hash] = observation.detail
        return Observation(ObservedStatus.COMPLETED, ",".join(hashes), {"deposits": credited})

    def _deposit(self, ctx: ExecutionContext, tx_hash: str) -> Observation:
        venues = _venues()
        if not tx_hash:
            return Observation(ObservedStatus.PENDING, detail={"waiting_for": "withdrawal tx"})
        deposit = _venue_call(
            venues.deposit_status, venue=ctx.config["venue"], tx_hash=tx_hash, fault=_fault(ctx)
        )
        detail = {**deposit.chain.as_dict(), "deposit": deposit.status}
        if deposit.status == "CREDITED":
            return Observation(ObservedStatus.COMPLETED, tx_hash, detail)
        if deposit.status == "REJECTED":
            return Observation(ObservedStatus.FAILED, tx_hash, detail)
        return _reorg_or(ctx, deposit.chain, Observation(ObservedStatus.PENDING, tx_hash, detail))


# --- chain ------------------------------------------------------------------------------------


@register("chain_tx_observe")
class ChainTxObserve(Executor):
    """Watch an upstream node's transaction reach its chain's finality."""

    def observe(self, ctx: ExecutionContext) -> Observation:
        venues = _venues()
        upstream = _upstream(ctx, key=ctx.config.get("source_node", ""))
        tx_hash = _tx_hash_of(ctx, upstream)
        if not tx_hash:
            return Observation(ObservedStatus.PENDING, detail={"waiting_for": "transaction"})
        status = _venue_call(venues.tx_status, tx_hash=tx_hash, fault=_fault(ctx))
        if not status.found:
            return Observation(
                ObservedStatus.UNKNOWN,
                tx_hash,
                {**status.as_dict(), "finding": "transaction not found"},
            )
        if status.final:
            return Observation(ObservedStatus.COMPLETED, tx_hash, status.as_dict())
        return _reorg_or(
            ctx, status, Observation(ObservedStatus.PENDING, tx_hash, status.as_dict())
        )


class SignedChainAction(Executor):
    """An on-chain action: sign once, persist the bytes, broadcast them; any retry or recovery
    re-broadcasts the same bytes and never signs again. Complete once included in a block;
    finality is watched by the node after it."""

    external_ref_name = "transaction hash"

    def payload(self, ctx: ExecutionContext) -> dict[str, Any]:
        raise NotImplementedError

    def key_id(self, ctx: ExecutionContext) -> str:
        return f"{ctx.config['chain']}:{ctx.config.get('from') or ctx.source}"

    def sign(self, ctx: ExecutionContext) -> Signed:
        venues = _venues()
        signed = _venue_call(venues.sign, key_id=self.key_id(ctx), payload=self.payload(ctx))
        return Signed(signed, {"tx_hash": venues.signed_tx_hash(signed)})

    def submit(self, ctx: ExecutionContext) -> Submitted:
        venues = _venues()
        if not ctx.signed_payload:
            raise DeterministicError("no signed payload to broadcast")
        fault = _fault(ctx)
        ctx.fence(self.call_timeout(ctx))
        tx_hash = _venue_call(venues.broadcast, signed_payload=ctx.signed_payload, fault=fault)
        return Submitted(tx_hash, detail={"tx_hash": tx_hash, "chain": ctx.config["chain"]})

    def observe(self, ctx: ExecutionContext) -> Observation:
        venues = _venues()
        status = _venue_call(venues.tx_status, tx_hash=ctx.external_ref, fault=_fault(ctx))
        if not status.found:
            return Observation(
                ObservedStatus.UNKNOWN,
                ctx.external_ref,
                {**status.as_dict(), "finding": "transaction not found"},
            )
        pending = Observation(ObservedStatus.PENDING, ctx.external_ref, status.as_dict())
        observation = _reorg_or(ctx, status, pending)
        if observation is pending and status.included:
            return Observation(ObservedStatus.COMPLETED, ctx.external_ref, status.as_dict())
        return observation

    def recover(self, ctx: ExecutionContext) -> Recovery:
        venues = _venues()
        if not ctx.signed_payload:
            return Recovery(
                RecoveredOutcome.FAILED,
                detail={"finding": "nothing was signed, so nothing was broadcast"},
            )
        tx_hash = venues.signed_tx_hash(ctx.signed_payload)
        if _venue_call(venues.is_known, tx_hash=tx_hash):
            return Recovery(
                RecoveredOutcome.SUBMITTED,
                tx_hash,
                {"tx_hash": tx_hash, "finding": "the chain has the transaction"},
            )
        try:
            _venue_call(venues.broadcast, signed_payload=ctx.signed_payload)
        except DeterministicError as exc:
            return Recovery(
                RecoveredOutcome.FAILED,
                tx_hash,
                {"tx_hash": tx_hash, "finding": exc.message, **exc.evidence},
            )
        return Recovery(
            RecoveredOutcome.SUBMITTED,
            tx_hash,
            {
                "tx_hash": tx_hash,
                "rebroadcast": True,
                "finding": "not on chain: re-broadcast the persisted signed bytes",
            },
        )


@register("cctp_burn")
class CctpBurn(SignedChainAction):
    needs_upstream = False

    def prepare(self, ctx: ExecutionContext) -> Prepared:
        _venues()
        _require_config(ctx, "chain", "destination_chain", "to")
        _require_chain(ctx.config["chain"])
        _require_chain(ctx.config["destination_chain"])
        _require_amount(ctx)
        if ctx.asset != "USDC":
            raise DeterministicError(f"CCTP moves USDC only, not {ctx.asset}")
        _fault(ctx)
        return Prepared({"chain": ctx.config["chain"]})

    def payload(self, ctx: ExecutionContext) -> dict[str, Any]:
        return {
            "op": "burn",
            "chain": ctx.config["chain"],
            "destination_chain": ctx.config["destination_chain"],
            "asset": ctx.asset,
            "amount": str(ctx.amount),
            "from": ctx.config.get("from") or ctx.source,
            "to": ctx.config["to"],
            "nonce": ctx.idempotency_key,
        }


@register("cctp_attestation_observe")
class CctpAttestationObserve(Executor):
    """Wait for Circle's attestation of the burn (issued once the burn is final)."""

    def observe(self, ctx: ExecutionContext) -> Observation:
        venues = _venues()
        burn = _upstream(ctx, key=ctx.config.get("source_node", ""), executor="cctp_burn")
        result = _venue_call(
            venues.attestation_status, burn_tx_hash=burn.external_ref, fault=_fault(ctx)
        )
        detail: dict[str, Any] = {"burn_tx_hash": burn.external_ref, "status": result.status}
        if result.burn is not None:
            detail.update(confirmations=result.burn.confirmations, required=result.burn.required)
        if result.status == "READY":
            return Observation(
                ObservedStatus.COMPLETED,
                burn.external_ref,
                {**detail, "attestation": result.message},
            )
        if result.status == "FAILED":
            return Observation(ObservedStatus.FAILED, burn.external_ref, detail)
        return Observation(ObservedStatus.PENDING, burn.external_ref, detail)


@register("cctp_mint")
class CctpMint(SignedChainAction):
    def prepare(self, ctx: ExecutionContext) -> Prepared:
        _venues()
        _require_config(ctx, "chain", "to")
        _require_chain(ctx.config["chain"])
        _require_amount(ctx)
        if not self._attestation(ctx).result.get("attestation"):
            raise DeterministicError("no attestation for the burn")
        _fault(ctx)
        return Prepared({"chain": ctx.config["chain"]})

    def _attestation(self, ctx: ExecutionContext) -> Upstream:
        return _upstream(ctx, executor="cctp_attestation_observe")

    def payload(self, ctx: ExecutionContext) -> dict[str, Any]:
        attestation = self._attestation(ctx).result
        return {
            "op": "mint",
            "chain": ctx.config["chain"],
            "asset": ctx.asset,
            "amount": str(ctx.amount),
            "to": ctx.config["to"],
            "burn_tx_hash": attestation["burn_tx_hash"],
            "attestation": attestation["attestation"],
            "nonce": ctx.idempotency_key,
        }

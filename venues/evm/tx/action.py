"""``ChainAction``: the one executor base for a node that sends one EVM transaction (the EVM
transfer, CCTP's burn and mint). A subclass says what the transaction does (``call``) and,
optionally, what comes before its first nonce, before each look, and how it reads a look's
outcome; the sequence -- prepare, sign once, fenced broadcast of the stored bytes, observe
through ``track`` to the chain's finality, recover through one look and
``policy.recovered`` -- is this class's alone, so no two chain actions can disagree on a
dropped, reorged or replaced transaction."""

from typing import Any

from movements.executors.base import (
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
    TransientError,
)
from qtg.core.errors import StaleState
from venues.evm import client
from venues.evm.config import evm_chain
from venues.evm.tx.broadcast import broadcast_transfer
from venues.evm.tx.build import (
    Transfer,
    node_transactions,
    prepare_transfer,
    signer_of,
    transaction_by_hash,
)
from venues.evm.tx.common import S
from venues.evm.tx.policy import recovered
from venues.evm.tx.sign import sign_stored
from venues.evm.tx.track import Track, track


class ChainAction(Executor):
    """Sign once, store the bytes, broadcast them; observe and recover through ``track``."""

    external_ref_name = "transaction hash"

    # --- what a subclass says ------------------------------------------------------------

    def call(self, ctx: ExecutionContext) -> Transfer:
        """The transaction's content: a ``Transfer`` or a ``ContractCall``. Raises
        ``DeterministicError`` when it cannot be built (unknown chain, account, address)."""
        raise NotImplementedError

    def before_first_nonce(self, ctx: ExecutionContext, call: Transfer) -> dict[str, Any]:
        """Runs in ``prepare`` before the node's transaction exists (facts to check, an
        allowance to ensure: raise ``TransientError`` to wait, ``DeterministicError`` to
        refuse). Its dict joins the prepare detail."""
        return {}

    def before_look(self, ctx: ExecutionContext, call: Transfer) -> None:
        """Runs before every observe look (e.g. moving the sender's allowance along)."""

    def checked(self, ctx: ExecutionContext, look: Track, observation: Observation) -> Observation:
        """The action's own reading of what one look concluded (e.g. that a COMPLETED
        transfer moved what was asked); the observation unchanged by default."""
        return observation

    # --- the one sequence ----------------------------------------------------------------

    def visibility_window(self, ctx: ExecutionContext) -> float:
        """How long the chain's nodes may not show a broadcast transaction (its config)."""
        try:
            return evm_chain(str(ctx.config.get("chain") or "")).broadcast_window_seconds
        except Exception:
            return self.visibility_seconds

    def call_timeout(self, ctx: ExecutionContext) -> float:
        """The chain's RPC timeout: the submit is one broadcast call, fenced for that long. A
        worker that dies with the call out leaves its node to recovery once that and the
        fence's margin have passed, not a generic 30 s later."""
        try:
            return evm_chain(str(ctx.config.get("chain") or "")).rpc_timeout_seconds
        except LookupError:
            return self.call_timeout_seconds

    def prepare(self, ctx: ExecutionContext) -> Prepared:
        call = self.call(ctx)
        detail: dict[str, Any] = {}
        existing = node_transactions(ctx.node_id)
        if not existing:
            detail = self.before_first_nonce(ctx, call)
        tx, reused = prepare_transfer(ctx, call, existing=existing)
        return Prepared(
            {
                **detail,
                "chain": tx.chain,
                "chain_transaction": tx.pk,
                "nonce": tx.nonce,
                "sender": call.sender,
                "recipient": call.recipient,
                "units": str(call.units),
                "reused": reused,
            }
        )

    def sign(self, ctx: ExecutionContext) -> Signed:
        call = self.call(ctx)
        txs = node_transactions(ctx.node_id)
        if not txs:
            # Its unsigned nonce was released while the node kept dying: a new one now.
            self.prepare(ctx)
            txs = node_transactions(ctx.node_id)
        original = txs[0]
        reused = original.state != S.CREATED
        try:
            tx = sign_stored(original, signer_of(call))
        except StaleState:
            raise TransientError("its nonce was released before it was signed") from None
        return Signed(
            tx.raw_signed, {"tx_hash": tx.tx_hash, "nonce": tx.nonce, "re_used_bytes": reused}
        )

    def submit(self, ctx: ExecutionContext) -> Submitted:
        if not ctx.signed_payload:
            raise DeterministicError("no signed transaction to broadcast")
        call = self.call(ctx)
        tx_hash = client.Web3.keccak(hexstr=ctx.signed_payload).to_0x_hex()
        tx = transaction_by_hash(call.chain.name, tx_hash)
        if tx is None or tx.raw_signed != ctx.signed_payload or tx.node_id != ctx.node_id:
            raise DeterministicError(f"the signed payload {tx_hash} is not a stored transaction")
        sent = broadcast_transfer(tx, ctx)
        detail = {"tx_hash": tx.tx_hash, "chain": tx.chain, "nonce": tx.nonce}
        if sent.outcome != "sent":
            detail["rpc"] = sent.outcome
        return Submitted(tx.tx_hash, detail=detail)

    def observation(self, ctx: ExecutionContext, look: Track) -> Observation:
        """The one mapping from a look to an observation."""
        detail = look.summary()
        original = look.original.tx_hash if look.original is not None else ""
        first = ctx.external_ref or original
        winner = look.winner
        if look.reorg:
            observed = Observation(ObservedStatus.REORG, first, detail)
        elif look.status == "finalized":
            replaced = winner.tx_hash != first
            if replaced:
                detail["replaced"] = first
            detail["fee_paid_wei"] = str(winner.fee_paid) if winner.fee_paid is not None else None
            observed = Observation(
                ObservedStatus.COMPLETED, winner.tx_hash, detail, replaced=replaced
            )
        elif look.status == "failed":
            detail["finding"] = "the transaction reverted (its fee is spent, nothing moved)"
            observed = Observation(ObservedStatus.FAILED, winner.tx_hash, detail)
        elif look.status == "dropped":
            observed = Observation(ObservedStatus.UNKNOWN, first, detail)
        else:
            observed = Observation(ObservedStatus.PENDING, first, detail)
        return self.checked(ctx, look, observed)

    def observe(self, ctx: ExecutionContext) -> Observation:
        self.before_look(ctx, self.call(ctx))
        return self.observation(ctx, track(ctx.node_id))

    def recover(self, ctx: ExecutionContext) -> Recovery:
        self.call(ctx)  # an action that cannot be built any more fails here, as it did
        return recovery(ctx, lambda look: self.observation(ctx, look))


def recovery(ctx: ExecutionContext, observe: Any) -> Recovery:
    """One look at the node's transactions, ``observe(look)`` reads it as the executor
    does, and the one rule (``policy.recovered``) concludes."""
    txs = node_transactions(ctx.node_id)
    signed = bool(txs) and any(tx.state != S.CREATED for tx in txs)
    if not signed:
        return Recovery(
            RecoveredOutcome.FAILED,
            detail={"finding": "nothing was signed, so nothing was broadcast"},
        )
    look = track(ctx.node_id)
    observation = observe(look)
    outcome = RecoveredOutcome(
        recovered(
            signed=signed,
            observed=str(observation.status),
            track_status=look.status,
            mined=look.winner is not None,
            refused="broadcast_refused" in look.detail,
        )
    )
    detail = {"finding": look.status, **observation.detail}
    settled = outcome in (RecoveredOutcome.COMPLETED, RecoveredOutcome.FAILED) and str(
        observation.status
    ) in ("COMPLETED", "FAILED")
    return Recovery(outcome, observation.external_ref if settled else txs[0].tx_hash, detail)

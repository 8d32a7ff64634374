"""``solana_transfer`` (ACTION) and ``solana_transfer_observe`` (OBSERVE): the template
``sol_transfer`` moves SOL or an SPL token from a configured account to an address.

The transfer node signs (a record SIGNED with its bytes before anything is sent; the worker
persists the payload on the node before submit), submits, and completes once its transaction
has landed at the chain's ``landed`` commitment. While it waits it re-sends the same bytes
(one signature: at most one landing) and, once the chain proves the transaction dead
(``fate.Fate.EXPIRED``), records it EXPIRED and carries on with a new transaction on a fresh
blockhash. The observe node then waits for the ``final`` commitment: the finality policy.
"""

from contextlib import suppress
from datetime import datetime, timedelta
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.utils import timezone
from solders.pubkey import Pubkey

from movements.executors import register
from movements.executors.base import (
    AmbiguousError,
    DeterministicError,
    ExecutionContext,
    Executor,
    NodeSpec,
    Observation,
    ObservedStatus,
    RecoveredOutcome,
    Recovery,
    Signed,
    Submitted,
    TransientError,
)
from venues.models import TxState

from . import records
from .amounts import AmountError, to_base_units
from .config import solana_chain
from .fate import Fate, Seen, fate
from .rpc import BlockhashNotFound, RpcUnavailable, SolanaRpcClient, TransactionRefused
from .transactions import SignedTransfer

# A node whose transactions keep expiring (congestion, a dead RPC node) is worth a look.
EXPIRIES_BEFORE_ATTENTION = 3
# Re-send the same bytes at most this often while they have not landed.
RESEND_SECONDS = 2.0


def _rpc(chain) -> SolanaRpcClient:
    return SolanaRpcClient(chain.rpc_url, timeout=chain.rpc_timeout_seconds)


def _transfer(config: dict[str, Any], asset: str, amount, source: str, destination: str):
    """Resolve the node's config into a ``records.Transfer``; DeterministicError if the
    movement can never be carried out as asked."""
    try:
        chain = solana_chain(str(config.get("chain", "")))
        account = chain.account(str(config.get("from", source)))
        token = chain.token(asset)
    except ImproperlyConfigured as exc:
        raise DeterministicError(str(exc)) from None
    try:
        recipient = Pubkey.from_string(str(config.get("to", destination)))
    except ValueError:
        raise DeterministicError(f"{destination!r} is not a Solana address") from None
    if recipient == account.address:
        raise DeterministicError("the destination is the source account")
    try:
        units = to_base_units(amount, token.decimals)
    except AmountError as exc:
        raise DeterministicError(f"{asset}: {exc}") from None
    return records.Transfer(chain, account, token, recipient, amount, units)


def check_mint_decimals(chain, token) -> None:
    """An SPL token's mint on chain has the configured ``decimals``, else DeterministicError
    naming both (refused at create, nothing sent)."""
    if token.native:
        return
    found = _rpc(chain).mint_decimals(token.mint, chain.blockhash_commitment)
    if found is None:
        raise DeterministicError(f"{token.asset} on {chain.name}: no mint account {token.mint}")
    if found != token.decimals:
        raise DeterministicError(
            f"{token.asset} on {chain.name}: the mint {token.mint} has {found} decimals, "
            f"the reviewed config says {token.decimals}; refused until the config is corrected"
        )


def _from_ctx(ctx: ExecutionContext) -> records.Transfer:
    return _transfer(ctx.config, ctx.asset, ctx.amount, ctx.source, ctx.destination)


@register("solana_transfer")
class SolanaTransfer(Executor):
    external_ref_name = "transaction signature"

    def validate(self, spec: NodeSpec) -> None:
        transfer = _transfer(spec.config, spec.asset, spec.amount, spec.source, spec.destination)
        # The mint's decimals from the chain must be the reviewed config's (a chain that does
        # not answer now: the token program's transfer_checked refuses a mismatch anyway).
        with suppress(RpcUnavailable):
            check_mint_decimals(transfer.chain, transfer.token)

    def call_timeout(self, ctx: ExecutionContext) -> float:
        """The chain's RPC timeout: the submit is one ``sendTransaction``, fenced for that
        long (a dead worker's node goes to recovery once that and the margin have passed)."""
        try:
            return solana_chain(str(ctx.config.get("chain", ""))).rpc_timeout_seconds
        except ImproperlyConfigured:
            return self.call_timeout_seconds

    def sign(self, ctx: ExecutionContext) -> Signed:
        transfer = _from_ctx(ctx)
        record = records.latest_transaction(ctx.node_id)
        try:
            if record is None or record.state in (TxState.FAILED, TxState.EXPIRED):
                # First attempt, or a new one after an operator's retry of a transfer whose
                # last transaction can never land: a new transaction.
                record = records.sign_new_transaction(
                    _rpc(transfer.chain),
                    transfer,
                    request_id=ctx.request_id,
                    node_id=ctx.node_id,
                    replaces=record,
                )
            elif record.state == TxState.CREATED:
                # A worker died between building and signing: the record is signed as it is.
                record = records.sign_record(transfer.chain, transfer.account, record)
        except RpcUnavailable as exc:
            raise TransientError(str(exc)) from None
        except ImproperlyConfigured as exc:
            raise DeterministicError(str(exc)) from None
        # Any other record is re-used as it is: signed and never sent (a worker died before
        # the payload was persisted), or sent and possibly landing — re-sending its bytes is
        # safe, a second transaction would not be.
        signed = records.signed_transfer(record)
        return Signed(signed.to_payload(), {"signature": signed.signature})

    def submit(self, ctx: ExecutionContext) -> Submitted:
        transfer = _from_ctx(ctx)
        signed = SignedTransfer.from_payload(ctx.signed_payload)
        record = records.transaction_by_signature(transfer.chain.name, signed.signature)
        if record is None:
            raise DeterministicError(f"no chain transaction recorded for {signed.signature}")
        # The send leaves only while this worker holds the node's lease (LeaseLost: not sent).
        ctx.fence(transfer.chain.rpc_timeout_seconds)
        record = records.mark_broadcast(record)
        try:
            _rpc(transfer.chain).send(
                signed.raw, preflight_commitment=transfer.chain.blockhash_commitment
            )
        except TransactionRefused as exc:
            records.mark_refused(record, str(exc))
            raise DeterministicError(f"refused at preflight: {exc}") from None
        except BlockhashNotFound as exc:
            # Never taken; it will be proved dead and replaced (observe/recover), not failed.
            raise AmbiguousError(f"blockhash refused at preflight: {exc}") from None
        except RpcUnavailable as exc:
            raise AmbiguousError(str(exc)) from None
        return Submitted(signed.signature, detail={"signature": signed.signature})

    def observe(self, ctx: ExecutionContext) -> Observation:
        state, detail = self._advance(ctx)
        if state == Fate.SETTLED:
            ref = detail["signature"]
            return Observation(ObservedStatus.COMPLETED, ref, detail, replaced=True)
        if state == Fate.FAILED:
            return Observation(ObservedStatus.FAILED, detail["signature"], detail)
        return Observation(ObservedStatus.PENDING, detail=detail)

    def recover(self, ctx: ExecutionContext) -> Recovery:
        state, detail = self._advance(ctx)
        outcome = {
            Fate.SETTLED: RecoveredOutcome.COMPLETED,
            Fate.FAILED: RecoveredOutcome.FAILED,
        }.get(state, RecoveredOutcome.SUBMITTED)
        return Recovery(outcome, detail["signature"], detail)

    def _advance(self, ctx: ExecutionContext) -> tuple[Fate, dict[str, Any]]:
        """Read the node's current transaction on chain and act on its fate: record it; if
        it has not landed, re-send its bytes; if it is dead, replace it. TransientError when
        the chain cannot be read (asked again later)."""
        transfer = _from_ctx(ctx)
        chain = transfer.chain
        rpc = _rpc(chain)
        record = records.latest_transaction(ctx.node_id)
        if record is None:
            raise TransientError("no transaction recorded for this node yet")
        try:
            if record.state in (TxState.CREATED, TxState.EXPIRED):
                # A worker died after proving the last one dead and before its replacement
                # was signed or sent: finish that first.
                return Fate.PENDING, self._carry_on(ctx, rpc, transfer, record)
            if record.state == TxState.FAILED:
                return Fate.FAILED, {"signature": record.tx_hash, "failed": "recorded"}
            seen = records.read_chain(rpc, chain, record)
            record = records.record_seen(record, seen, final=chain.final_commitment)
            state = fate(seen, wanted=chain.landed_commitment)
            detail = _detail(record.tx_hash, seen)
            if state == Fate.FAILED:
                records.mark_failed(record, seen)
            elif state == Fate.PENDING:
                self._resend(rpc, chain, record)
            elif state == Fate.EXPIRED:
                expired = records.mark_expired(record, seen)
                detail = {
                    **self._carry_on(ctx, rpc, transfer, expired),
                    "expired_at_height": seen.final_height,
                    "last_valid_block_height": seen.last_valid_block_height,
                }
                state = Fate.PENDING
        except RpcUnavailable as exc:
            raise TransientError(str(exc)) from None
        return state, detail

    @staticmethod
    def _resend(rpc: SolanaRpcClient, chain, record) -> None:
        """The same bytes again (a node may have dropped them); harmless if they landed."""
        since = record.broadcast_at and (timezone.now() - record.broadcast_at).total_seconds()
        if since is not None and since < RESEND_SECONDS:
            return
        record = records.mark_broadcast(record)
        raw = records.signed_transfer(record).raw
        # Refused: it landed meanwhile (read next time), or it is on its way to expiry.
        with suppress(BlockhashNotFound, TransactionRefused):
            rpc.send(raw, preflight_commitment=chain.blockhash_commitment)

    def _carry_on(self, ctx, rpc, transfer, last) -> dict[str, Any]:
        """The transfer continues in a new transaction: ``last`` is EXPIRED (proven dead, so
        a new one on a fresh blockhash is signed and stored) or CREATED (such a new one that a
        worker built and did not sign). Then it is sent."""
        if last.state == TxState.EXPIRED:
            expired = last
            new = records.sign_new_transaction(
                rpc, transfer, request_id=ctx.request_id, node_id=ctx.node_id, replaces=last
            )
        else:
            expired = last.replaces
            new = records.sign_record(transfer.chain, transfer.account, last)
        detail: dict[str, Any] = {"signature": new.tx_hash}
        if expired is not None:
            detail["expired"] = expired.tx_hash
        expiries = records.expired_count(ctx.node_id)
        if expiries >= EXPIRIES_BEFORE_ATTENTION:
            detail["attention"] = {
                "reason": "expired",
                "message": f"{expiries} transactions of this transfer expired unlanded; "
                "the latest was re-signed and sent on a fresh blockhash",
            }
        new = records.mark_broadcast(new)
        try:
            rpc.send(
                records.signed_transfer(new).raw,
                preflight_commitment=transfer.chain.blockhash_commitment,
            )
        except TransactionRefused as exc:
            records.mark_refused(new, str(exc))
            raise DeterministicError(f"the new transaction was refused: {exc}") from None
        except (BlockhashNotFound, RpcUnavailable):
            pass  # stored and BROADCAST: re-sent or proved dead at the next look
        return detail


def _detail(signature: str, seen: Seen) -> dict[str, Any]:
    detail: dict[str, Any] = {
        "signature": signature,
        "slot": seen.landed_slot,
        "commitment": seen.level,
        "err": seen.err,
    }
    if seen.seen_at is not None:
        detail["seen_at"] = seen.seen_at
    if seen.contradiction is not None:
        # Not concluded EXPIRED: the endpoints do not all agree (looked at again).
        detail["endpoints"] = list(seen.endpoints)
        detail["waiting_for"] = f"every endpoint to agree it never landed ({seen.contradiction})"
    return detail


@register("solana_transfer_observe")
class SolanaTransferObserve(Executor):
    """Waits for the transfer's transaction to reach the chain's final commitment."""

    def validate(self, spec: NodeSpec) -> None:
        try:
            solana_chain(str(spec.config.get("chain", "")))
        except ImproperlyConfigured as exc:
            raise DeterministicError(str(exc)) from None

    def observe(self, ctx: ExecutionContext) -> Observation:
        chain = solana_chain(str(ctx.config.get("chain", "")))
        source = ctx.upstream.get(str(ctx.config.get("source_node", "transfer")))
        if source is None or not source.external_ref:
            raise DeterministicError("the transfer node has no transaction signature")
        record = records.transaction_by_signature(chain.name, source.external_ref)
        if record is None:
            raise DeterministicError(f"no chain transaction recorded for {source.external_ref}")
        try:
            seen = records.read_chain(_rpc(chain), chain, record)
        except RpcUnavailable as exc:
            raise TransientError(str(exc)) from None
        record = records.record_seen(record, seen, final=chain.final_commitment)
        detail = _detail(record.tx_hash, seen)
        if seen.landed_slot is None and ctx.result.get("final_since"):
            return _final_gone(chain, ctx, record, seen, detail)
        if seen.landed_slot is None:
            # Landed once (the transfer completed on it) and now in no block: a reorg.
            return Observation(ObservedStatus.REORG, record.tx_hash, detail)
        state = fate(seen, wanted=chain.final_commitment)
        if state == Fate.SETTLED:
            return _watched(chain, ctx, record.tx_hash, detail)
        if state == Fate.FAILED:
            return Observation(ObservedStatus.FAILED, record.tx_hash, detail)
        return Observation(ObservedStatus.PENDING, detail=detail)


def _watched(chain, ctx: ExecutionContext, signature: str, detail: dict[str, Any]) -> Observation:
    """Final at the chain's final commitment: COMPLETED once the chain's ``post_final_watch``
    has passed since finality was first seen (as on EVM chains); until then the node keeps
    looking, the movement is not COMPLETED and its reservation stays HELD."""
    now = timezone.now()
    since = ctx.result.get("final_since")
    first = datetime.fromisoformat(since) if since else now
    detail["final_since"] = first.isoformat()
    until = first + timedelta(seconds=chain.post_final_watch)
    if now < until:
        detail["waiting_for"] = f"the post-final watch of {chain.name} (until {until.isoformat()})"
        detail["watch_until"] = until.isoformat()
        return Observation(ObservedStatus.PENDING, signature, detail)
    detail["watched_seconds"] = chain.post_final_watch
    return Observation(ObservedStatus.COMPLETED, signature, detail)


def _final_gone(chain, ctx: ExecutionContext, record, seen: Seen, detail) -> Observation:
    """A signature final by the chain's commitment answers no status while it is watched. A
    status view behind its landing slot proves nothing (it lags: looked at again); a null
    answer whose context slot covers the landing slot contradicts finality: QTG's record
    walks back FINALIZED -> PENDING (its ledger entry compensated, append-only), an operator
    is paged (``final_reorg``) and the node goes UNKNOWN, so the movement reaches
    MANUAL_INTERVENTION with its reservation HELD. Where the chain lists several endpoints, a
    landing at any of them is no vanishing (``read_chain``), and one that errs blocks it."""
    landed = record.block_number
    covered = seen.status_slot is not None and landed is not None and seen.status_slot >= landed
    if covered and seen.contradiction is not None:
        # Several endpoints that do not all agree it is gone (one errs, or answers short of
        # the landing): no conclusion, looked at again.
        return Observation(
            ObservedStatus.PENDING,
            record.tx_hash,
            {**detail, "final_since": ctx.result.get("final_since")},
        )
    if not covered:
        return Observation(
            ObservedStatus.PENDING,
            record.tx_hash,
            {
                **detail,
                "final_since": ctx.result.get("final_since"),
                "waiting_for": "the status view to reach the finalized signature's slot "
                f"{landed} (it answers at {seen.status_slot})",
            },
        )
    evidence = {
        "signature": record.tx_hash,
        "landed_slot": landed,
        "status_context_slot": seen.status_slot,
        "final_slot": seen.final_slot,
        "final_since": ctx.result.get("final_since"),
        "policy": chain.final_commitment,
    }
    if record.state == TxState.FINALIZED:
        records.walk_back_final(record, evidence)
    message = (
        f"{record.tx_hash}, final on {chain.name} ({chain.final_commitment}) in slot {landed}, "
        "is no longer on the chain: the money may not have moved; its ledger entry is "
        "compensated"
    )
    return Observation(
        ObservedStatus.REORG,
        record.tx_hash,
        {
            **detail,
            **evidence,
            "final_since": "",
            "final_reorg": True,
            "attention": {"reason": "final_reorg", "message": message},
        },
    )
